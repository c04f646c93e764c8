/* LP64 BLAS/LAPACK entry points that OpenCV's wheel imports, forwarded to numpy's ILP64 OpenBLAS.
 *
 * opencv-python(-headless) vendors its own OpenBLAS 0.3.3 (37 MB) and calls 19 of its
 * functions (cv2.abi3.so's imports: cblas_[sdcz]gemm, [sd]gesv_, [sd]getrf_, [sd]posv_,
 * [sd]potrf_, [sd]geqrf_, [sd]gels_, [sd]gesdd_, dgeev_) with 32-bit integers. numpy
 * 1.26 vendors OpenBLAS 0.3.23 built with 64-bit integers and the symbol suffix "64_"
 * (cblas_sgemm64_, sgesv_64_, ...). This library stands in for OpenCV's copy: every
 * function widens its integer arguments, calls numpy's copy and narrows the integer
 * outputs (info, pivot indices) back. Integer arrays (ipiv, iwork) get int64 buffers.
 *
 * Prototypes: reference LAPACK 3.x (Fortran calling convention: every argument by
 * pointer; CHARACTER arguments get a hidden length after the last argument, passed
 * here as 1) and CBLAS (cblas.h). Built without libc headers so that binutils plus a
 * C compiler, or binutils alone with the generated openblas_lp64_shim.s, are enough:
 *
 *   gcc -O2 -fPIC -fno-stack-protector -fno-asynchronous-unwind-tables -fno-ident -S \
 *       -o packaging/shims/openblas_lp64_shim.s packaging/shims/openblas_lp64_shim.c
 *
 * malloc/free come from the C library already loaded in the process.
 */
typedef long long i64;
typedef unsigned long size_t;
void *malloc(size_t);
void free(void *);

#define EXPORT __attribute__((visibility("default")))

/* ---- CBLAS gemm ---------------------------------------------------------- */
void cblas_sgemm64_(int, int, int, i64, i64, i64, float, const float *, i64, const float *, i64,
                    float, float *, i64);
void cblas_dgemm64_(int, int, int, i64, i64, i64, double, const double *, i64, const double *,
                    i64, double, double *, i64);
void cblas_cgemm64_(int, int, int, i64, i64, i64, const void *, const void *, i64, const void *,
                    i64, const void *, void *, i64);
void cblas_zgemm64_(int, int, int, i64, i64, i64, const void *, const void *, i64, const void *,
                    i64, const void *, void *, i64);

EXPORT void cblas_sgemm(int o, int ta, int tb, int m, int n, int k, float alpha, const float *a,
                        int lda, const float *b, int ldb, float beta, float *c, int ldc) {
    cblas_sgemm64_(o, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
EXPORT void cblas_dgemm(int o, int ta, int tb, int m, int n, int k, double alpha, const double *a,
                        int lda, const double *b, int ldb, double beta, double *c, int ldc) {
    cblas_dgemm64_(o, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
EXPORT void cblas_cgemm(int o, int ta, int tb, int m, int n, int k, const void *alpha,
                        const void *a, int lda, const void *b, int ldb, const void *beta, void *c,
                        int ldc) {
    cblas_cgemm64_(o, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
EXPORT void cblas_zgemm(int o, int ta, int tb, int m, int n, int k, const void *alpha,
                        const void *a, int lda, const void *b, int ldb, const void *beta, void *c,
                        int ldc) {
    cblas_zgemm64_(o, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* ---- helpers --------------------------------------------------------------- */
static i64 *wide(const int *src, i64 count) {
    i64 *dst = (i64 *)malloc(sizeof(i64) * (size_t)(count > 0 ? count : 1));
    if (dst && src)
        for (i64 i = 0; i < count; i++) dst[i] = src[i];
    return dst;
}
static void narrow(int *dst, const i64 *src, i64 count) {
    for (i64 i = 0; i < count; i++) dst[i] = (int)src[i];
}
#define MIN(a, b) ((a) < (b) ? (a) : (b))
/* LAPACK's INFO for "out of memory" does not exist; -1000 is outside every documented
 * range (negative = illegal argument i, positive = numerical failure), so OpenCV reports
 * a failed decomposition. */
#define NOMEM (-1000)

/* ---- ?gesv: A X = B by LU ---------------------------------------------------- */
#define GESV(T, F)                                                                        \
    void F##_64_(const i64 *, const i64 *, T *, const i64 *, i64 *, T *, const i64 *, i64 *); \
    EXPORT void F##_(const int *n, const int *nrhs, T *a, const int *lda, int *ipiv, T *b,  \
                     const int *ldb, int *info) {                                           \
        i64 N = *n, NRHS = *nrhs, LDA = *lda, LDB = *ldb, INFO = 0;                         \
        i64 *piv = wide(0, N);                                                              \
        if (!piv) { *info = NOMEM; return; }                                                \
        F##_64_(&N, &NRHS, a, &LDA, piv, b, &LDB, &INFO);                                   \
        narrow(ipiv, piv, N);                                                               \
        free(piv);                                                                          \
        *info = (int)INFO;                                                                  \
    }
GESV(float, sgesv)
GESV(double, dgesv)

/* ---- ?getrf: LU with partial pivoting ------------------------------------------ */
#define GETRF(T, F)                                                                             \
    void F##_64_(const i64 *, const i64 *, T *, const i64 *, i64 *, i64 *);                     \
    EXPORT void F##_(const int *m, const int *n, T *a, const int *lda, int *ipiv, int *info) {  \
        i64 M = *m, N = *n, LDA = *lda, INFO = 0, K = MIN(M, N);                                \
        i64 *piv = wide(0, K);                                                                  \
        if (!piv) { *info = NOMEM; return; }                                                    \
        F##_64_(&M, &N, a, &LDA, piv, &INFO);                                                   \
        narrow(ipiv, piv, K);                                                                   \
        free(piv);                                                                              \
        *info = (int)INFO;                                                                      \
    }
GETRF(float, sgetrf)
GETRF(double, dgetrf)

/* ---- ?posv / ?potrf: Cholesky ---------------------------------------------------- */
#define POSV(T, F)                                                                              \
    void F##_64_(const char *, const i64 *, const i64 *, T *, const i64 *, T *, const i64 *,    \
                 i64 *, size_t);                                                                \
    EXPORT void F##_(const char *uplo, const int *n, const int *nrhs, T *a, const int *lda,     \
                     T *b, const int *ldb, int *info) {                                         \
        i64 N = *n, NRHS = *nrhs, LDA = *lda, LDB = *ldb, INFO = 0;                             \
        F##_64_(uplo, &N, &NRHS, a, &LDA, b, &LDB, &INFO, 1);                                   \
        *info = (int)INFO;                                                                      \
    }
POSV(float, sposv)
POSV(double, dposv)

#define POTRF(T, F)                                                                             \
    void F##_64_(const char *, const i64 *, T *, const i64 *, i64 *, size_t);                   \
    EXPORT void F##_(const char *uplo, const int *n, T *a, const int *lda, int *info) {         \
        i64 N = *n, LDA = *lda, INFO = 0;                                                       \
        F##_64_(uplo, &N, a, &LDA, &INFO, 1);                                                   \
        *info = (int)INFO;                                                                      \
    }
POTRF(float, spotrf)
POTRF(double, dpotrf)

/* ---- ?geqrf: QR --------------------------------------------------------------------- */
#define GEQRF(T, F)                                                                             \
    void F##_64_(const i64 *, const i64 *, T *, const i64 *, T *, T *, const i64 *, i64 *);     \
    EXPORT void F##_(const int *m, const int *n, T *a, const int *lda, T *tau, T *work,         \
                     const int *lwork, int *info) {                                             \
        i64 M = *m, N = *n, LDA = *lda, LWORK = *lwork, INFO = 0;                               \
        F##_64_(&M, &N, a, &LDA, tau, work, &LWORK, &INFO);                                     \
        *info = (int)INFO;                                                                      \
    }
GEQRF(float, sgeqrf)
GEQRF(double, dgeqrf)

/* ---- ?gels: least squares by QR/LQ --------------------------------------------------- */
#define GELS(T, F)                                                                              \
    void F##_64_(const char *, const i64 *, const i64 *, const i64 *, T *, const i64 *, T *,    \
                 const i64 *, T *, const i64 *, i64 *, size_t);                                 \
    EXPORT void F##_(const char *trans, const int *m, const int *n, const int *nrhs, T *a,      \
                     const int *lda, T *b, const int *ldb, T *work, const int *lwork,           \
                     int *info) {                                                               \
        i64 M = *m, N = *n, NRHS = *nrhs, LDA = *lda, LDB = *ldb, LWORK = *lwork, INFO = 0;     \
        F##_64_(trans, &M, &N, &NRHS, a, &LDA, b, &LDB, work, &LWORK, &INFO, 1);                \
        *info = (int)INFO;                                                                      \
    }
GELS(float, sgels)
GELS(double, dgels)

/* ---- ?gesdd: SVD, divide and conquer (iwork: 8*min(m,n) integers) --------------------- */
#define GESDD(T, F)                                                                             \
    void F##_64_(const char *, const i64 *, const i64 *, T *, const i64 *, T *, T *,            \
                 const i64 *, T *, const i64 *, T *, const i64 *, i64 *, i64 *, size_t);        \
    EXPORT void F##_(const char *jobz, const int *m, const int *n, T *a, const int *lda, T *s,  \
                     T *u, const int *ldu, T *vt, const int *ldvt, T *work, const int *lwork,   \
                     int *iwork, int *info) {                                                   \
        i64 M = *m, N = *n, LDA = *lda, LDU = *ldu, LDVT = *ldvt, LWORK = *lwork, INFO = 0;     \
        i64 *iw = wide(0, 8 * MIN(M, N));                                                       \
        (void)iwork;                                                                            \
        if (!iw) { *info = NOMEM; return; }                                                     \
        F##_64_(jobz, &M, &N, a, &LDA, s, u, &LDU, vt, &LDVT, work, &LWORK, iw, &INFO, 1);      \
        free(iw);                                                                               \
        *info = (int)INFO;                                                                      \
    }
GESDD(float, sgesdd)
GESDD(double, dgesdd)

/* ---- dgeev: eigenvalues/vectors of a general matrix ------------------------------------ */
void dgeev_64_(const char *, const char *, const i64 *, double *, const i64 *, double *, double *,
               double *, const i64 *, double *, const i64 *, double *, const i64 *, i64 *, size_t,
               size_t);
EXPORT void dgeev_(const char *jobvl, const char *jobvr, const int *n, double *a, const int *lda,
                   double *wr, double *wi, double *vl, const int *ldvl, double *vr,
                   const int *ldvr, double *work, const int *lwork, int *info) {
    i64 N = *n, LDA = *lda, LDVL = *ldvl, LDVR = *ldvr, LWORK = *lwork, INFO = 0;
    dgeev_64_(jobvl, jobvr, &N, a, &LDA, wr, wi, vl, &LDVL, vr, &LDVR, work, &LWORK, &INFO, 1, 1);
    *info = (int)INFO;
}
