"""Avatar panel: load an avatar, background colour or transparent, lighting preset, MSAA."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QButtonGroup,
    QColorDialog,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QRadioButton,
    QVBoxLayout,
)

from avatar_app.pipeline import settings as store
from avatar_app.ui.panels import Panel, hint

CHROMA_GREEN = [0, 177, 64]


def loader_available() -> bool:
    """Whether avatar_app.avatar.loader (glTF/VRM loading) is part of this installation."""
    return importlib.util.find_spec("avatar_app.avatar.loader") is not None


class AvatarPanel(Panel):
    """Load a glTF/VRM avatar; chroma green, a colour of your choice or a transparent background
    (for compositing; record in a format that keeps alpha); lighting preset; MSAA.
    """

    def __init__(self, session, bridge=None, notifier=None):
        super().__init__(session, bridge, notifier)
        a = session.settings.avatar
        lay = QVBoxLayout(self)

        lg = QGroupBox("Avatar")
        ll = QVBoxLayout(lg)
        self.avatar_label = QLabel(Path(a.path).name if a.path else "Default head")
        self.avatar_label.setWordWrap(True)
        ll.addWidget(self.avatar_label)
        row = QHBoxLayout()
        self.load_button = QPushButton("Load avatar…")
        self.load_button.clicked.connect(self.choose_file)
        self.default_button = QPushButton("Default head")
        self.default_button.clicked.connect(self.use_default)
        row.addWidget(self.load_button)
        row.addWidget(self.default_button)
        ll.addLayout(row)
        if not loader_available():
            why = "Loading glTF/VRM avatars needs avatar_app.avatar.loader, which this version lacks."
            self.load_button.setEnabled(False)
            self.load_button.setToolTip(why)
            ll.addWidget(hint(why))
        lay.addWidget(lg)

        bg = QGroupBox("Background")
        bl = QVBoxLayout(bg)
        self.bg_green = QRadioButton("Chroma green (for OBS chroma key)")
        self.bg_colour = QRadioButton("Colour")
        self.bg_transparent = QRadioButton("Transparent (alpha)")
        self.bg_transparent.setToolTip("Transparent outside the avatar, for compositing. Recordings then use "
                                       "ProRes 4444 (.mov) or VP9 (.webm), which keep the alpha channel, "
                                       "whatever the Output format (H.264 cannot store it)")
        self.bg_group = QButtonGroup(self)
        for i, b in enumerate((self.bg_green, self.bg_colour, self.bg_transparent)):
            self.bg_group.addButton(b, i)
        crow = QHBoxLayout()
        crow.addWidget(self.bg_colour)
        self.colour_button = QPushButton("Pick…")
        self.colour_button.clicked.connect(self.pick_colour)
        crow.addWidget(self.colour_button)
        crow.addStretch(1)
        bl.addWidget(self.bg_green)
        bl.addLayout(crow)
        bl.addWidget(self.bg_transparent)
        lay.addWidget(bg)

        rg = QGroupBox("Rendering")
        form = QFormLayout(rg)
        self.lighting = QComboBox()
        for name in store.LIGHTING_CHOICES:
            self.lighting.addItem(name.capitalize(), name)
        self.msaa = QComboBox()
        for n in (0, 2, 4, 8):
            self.msaa.addItem("Off" if n == 0 else f"{n}x", n)
        self.msaa.setToolTip("Multisample anti-aliasing. Software OpenGL pays roughly per sample.")
        form.addRow("Lighting", self.lighting)
        form.addRow("MSAA", self.msaa)
        lay.addWidget(rg)
        lay.addStretch(1)

        self.show_settings(a)
        self.bg_group.idToggled.connect(lambda _i, on: on and self._changed())
        self.lighting.currentIndexChanged.connect(self._changed)
        self.msaa.currentIndexChanged.connect(self._changed)

    def show_settings(self, a: store.AvatarSettings) -> None:
        """Show background, lighting and MSAA of ``a`` (does not apply them; the path is the session's)."""
        self._colour = list(a.background) if isinstance(a.background, list) else list(CHROMA_GREEN)
        self._loading = True
        if a.background == "transparent":
            self.bg_transparent.setChecked(True)
        elif list(a.background) == CHROMA_GREEN:
            self.bg_green.setChecked(True)
        else:
            self.bg_colour.setChecked(True)
        self.lighting.setCurrentIndex(max(0, self.lighting.findData(a.lighting)))
        self.msaa.setCurrentIndex(max(0, self.msaa.findData(a.msaa)))
        self._loading = False
        self._update_swatch()

    def _update_swatch(self) -> None:
        r, g, b = self._colour
        self.colour_button.setStyleSheet(f"background: rgb({r},{g},{b}); color: {'black' if g > 140 else 'white'};")

    def current(self) -> store.AvatarSettings:
        """The settings the widgets show."""
        if self.bg_transparent.isChecked():
            background = "transparent"
        elif self.bg_green.isChecked():
            background = list(CHROMA_GREEN)
        else:
            background = list(self._colour)
        return store.AvatarSettings(path=self.session.settings.avatar.path, background=background,
                                    lighting=self.lighting.currentData(), msaa=int(self.msaa.currentData()))

    def _changed(self, *_):
        if not self._loading:
            self.session.set_avatar_settings(self.current())

    def set_colour(self, rgb) -> None:
        """Use a solid background colour (R, G, B bytes)."""
        self._colour = [int(c) for c in rgb]
        self._update_swatch()
        if self.bg_colour.isChecked():
            self._changed()
        else:
            self.bg_colour.setChecked(True)

    def pick_colour(self) -> None:
        c = QColorDialog.getColor(QColor(*self._colour), self, "Background colour")
        if c.isValid():
            self.set_colour((c.red(), c.green(), c.blue()))

    def choose_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Load an avatar", str(Path.home()),
                                              "Avatars (*.glb *.gltf *.vrm);;All files (*)")
        if path:
            self.load(Path(path))

    def load(self, path: Path) -> bool:
        """Load the avatar at ``path`` in the background (the view shows it once loaded); False when this
        installation cannot load avatars (and says so)."""
        if not loader_available():
            self.notifier.error(self.load_button.toolTip())
            return False
        self.session.load_avatar(Path(path))
        return True

    def use_default(self) -> None:
        """Show the default head again (remembered)."""
        from avatar_app.pipeline.studio_api import build_default_head

        self.bridge.avatar_loaded.emit(None, build_default_head())

    def on_avatar_loaded(self, path: Path, mesh=None) -> None:
        """The view shows the avatar of ``path`` (None: the default head; ``mesh``: the avatar, with its
        load report if any)."""
        if path is None:
            self.avatar_label.setText("Default head")
            self.avatar_label.setToolTip("")
            return
        text = Path(path).name
        report = getattr(mesh, "report", None)
        if report is not None:
            mapped = len(getattr(report, "mapped_arkit", []))
            text += f"\n{report.kind}: {mapped} of 52 ARKit shapes drive it; head: {report.head}"
            if report.warnings:
                text += "\n" + "\n".join(report.warnings[:3])
        self.avatar_label.setText(text)
        self.avatar_label.setToolTip(str(path))
