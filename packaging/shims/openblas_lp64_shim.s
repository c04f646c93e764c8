# Generated from openblas_lp64_shim.c (x86-64, gcc 12, -O2); regenerate with:
#   gcc -O2 -fPIC -fno-stack-protector -fno-asynchronous-unwind-tables -fno-ident -S \
#       -o packaging/shims/openblas_lp64_shim.s packaging/shims/openblas_lp64_shim.c
# packaging/slim.py assembles it with binutils (as, ld): no C compiler at build time.
	.file	"openblas_lp64_shim.c"
	.text
	.p2align 4
	.type	wide.constprop.0, @function
wide.constprop.0:
	leaq	0(,%rdi,8), %rax
	testq	%rdi, %rdi
	movl	$8, %edx
	cmovg	%rax, %rdx
	movq	%rdx, %rdi
	jmp	malloc@PLT
	.size	wide.constprop.0, .-wide.constprop.0
	.p2align 4
	.globl	cblas_sgemm
	.type	cblas_sgemm, @function
cblas_sgemm:
	movslq	48(%rsp), %rax
	movslq	%ecx, %rcx
	movslq	%r9d, %r9
	movslq	%r8d, %r8
	movq	%rax, 48(%rsp)
	movslq	32(%rsp), %rax
	movq	%rax, 32(%rsp)
	movslq	16(%rsp), %rax
	movq	%rax, 16(%rsp)
	jmp	cblas_sgemm64_@PLT
	.size	cblas_sgemm, .-cblas_sgemm
	.p2align 4
	.globl	cblas_dgemm
	.type	cblas_dgemm, @function
cblas_dgemm:
	movslq	48(%rsp), %rax
	movslq	%ecx, %rcx
	movslq	%r9d, %r9
	movslq	%r8d, %r8
	movq	%rax, 48(%rsp)
	movslq	32(%rsp), %rax
	movq	%rax, 32(%rsp)
	movslq	16(%rsp), %rax
	movq	%rax, 16(%rsp)
	jmp	cblas_dgemm64_@PLT
	.size	cblas_dgemm, .-cblas_dgemm
	.p2align 4
	.globl	cblas_cgemm
	.type	cblas_cgemm, @function
cblas_cgemm:
	movslq	64(%rsp), %rax
	movslq	%ecx, %rcx
	movslq	%r9d, %r9
	movslq	%r8d, %r8
	movq	%rax, 64(%rsp)
	movslq	40(%rsp), %rax
	movq	%rax, 40(%rsp)
	movslq	24(%rsp), %rax
	movq	%rax, 24(%rsp)
	jmp	cblas_cgemm64_@PLT
	.size	cblas_cgemm, .-cblas_cgemm
	.p2align 4
	.globl	cblas_zgemm
	.type	cblas_zgemm, @function
cblas_zgemm:
	movslq	64(%rsp), %rax
	movslq	%ecx, %rcx
	movslq	%r9d, %r9
	movslq	%r8d, %r8
	movq	%rax, 64(%rsp)
	movslq	40(%rsp), %rax
	movq	%rax, 40(%rsp)
	movslq	24(%rsp), %rax
	movq	%rax, 24(%rsp)
	jmp	cblas_zgemm64_@PLT
	.size	cblas_zgemm, .-cblas_zgemm
	.p2align 4
	.globl	sgesv_
	.type	sgesv_, @function
sgesv_:
	pushq	%r13
	movq	%r9, %r13
	pushq	%r12
	movq	%rdx, %r12
	pushq	%rbp
	movq	%r8, %rbp
	pushq	%rbx
	subq	$56, %rsp
	movslq	(%rsi), %rax
	movslq	(%rdi), %rdi
	movq	$0, 40(%rsp)
	movq	%rax, 16(%rsp)
	movslq	(%rcx), %rax
	movq	%rdi, 8(%rsp)
	movq	%rax, 24(%rsp)
	movq	96(%rsp), %rax
	movslq	(%rax), %rax
	movq	%rax, 32(%rsp)
	call	wide.constprop.0
	movq	%rax, %rbx
	movl	$-1000, %eax
	testq	%rbx, %rbx
	je	.L10
	leaq	40(%rsp), %rax
	leaq	24(%rsp), %rcx
	movq	%r12, %rdx
	movq	%r13, %r9
	leaq	16(%rsp), %rsi
	leaq	8(%rsp), %rdi
	pushq	%rax
	movq	%rbx, %r8
	leaq	40(%rsp), %rax
	pushq	%rax
	call	sgesv_64_@PLT
	movq	24(%rsp), %rcx
	popq	%rax
	popq	%rdx
	testq	%rcx, %rcx
	jle	.L11
	xorl	%eax, %eax
	.p2align 4,,10
	.p2align 3
.L12:
	movq	(%rbx,%rax,8), %rdx
	movl	%edx, 0(%rbp,%rax,4)
	addq	$1, %rax
	cmpq	%rax, %rcx
	jne	.L12
.L11:
	movq	%rbx, %rdi
	call	free@PLT
	movl	40(%rsp), %eax
.L10:
	movq	104(%rsp), %rdx
	movl	%eax, (%rdx)
	addq	$56, %rsp
	popq	%rbx
	popq	%rbp
	popq	%r12
	popq	%r13
	ret
	.size	sgesv_, .-sgesv_
	.p2align 4
	.globl	dgesv_
	.type	dgesv_, @function
dgesv_:
	pushq	%r13
	movq	%r9, %r13
	pushq	%r12
	movq	%rdx, %r12
	pushq	%rbp
	movq	%r8, %rbp
	pushq	%rbx
	subq	$56, %rsp
	movslq	(%rsi), %rax
	movslq	(%rdi), %rdi
	movq	$0, 40(%rsp)
	movq	%rax, 16(%rsp)
	movslq	(%rcx), %rax
	movq	%rdi, 8(%rsp)
	movq	%rax, 24(%rsp)
	movq	96(%rsp), %rax
	movslq	(%rax), %rax
	movq	%rax, 32(%rsp)
	call	wide.constprop.0
	movq	%rax, %rbx
	movl	$-1000, %eax
	testq	%rbx, %rbx
	je	.L19
	leaq	40(%rsp), %rax
	leaq	24(%rsp), %rcx
	movq	%r12, %rdx
	movq	%r13, %r9
	leaq	16(%rsp), %rsi
	leaq	8(%rsp), %rdi
	pushq	%rax
	movq	%rbx, %r8
	leaq	40(%rsp), %rax
	pushq	%rax
	call	dgesv_64_@PLT
	movq	24(%rsp), %rcx
	popq	%rax
	popq	%rdx
	testq	%rcx, %rcx
	jle	.L20
	xorl	%eax, %eax
	.p2align 4,,10
	.p2align 3
.L21:
	movq	(%rbx,%rax,8), %rdx
	movl	%edx, 0(%rbp,%rax,4)
	addq	$1, %rax
	cmpq	%rax, %rcx
	jne	.L21
.L20:
	movq	%rbx, %rdi
	call	free@PLT
	movl	40(%rsp), %eax
.L19:
	movq	104(%rsp), %rdx
	movl	%eax, (%rdx)
	addq	$56, %rsp
	popq	%rbx
	popq	%rbp
	popq	%r12
	popq	%r13
	ret
	.size	dgesv_, .-dgesv_
	.p2align 4
	.globl	sgetrf_
	.type	sgetrf_, @function
sgetrf_:
	pushq	%r14
	movq	%rdx, %r14
	pushq	%r13
	movq	%r9, %r13
	pushq	%r12
	movq	%r8, %r12
	pushq	%rbp
	pushq	%rbx
	subq	$32, %rsp
	movslq	(%rdi), %rbx
	movslq	(%rsi), %rax
	movq	$0, 24(%rsp)
	movslq	(%rcx), %rdx
	cmpq	%rax, %rbx
	movq	%rbx, (%rsp)
	cmovg	%rax, %rbx
	movq	%rax, 8(%rsp)
	movq	%rdx, 16(%rsp)
	movq	%rbx, %rdi
	call	wide.constprop.0
	movq	%rax, %rbp
	movl	$-1000, %eax
	testq	%rbp, %rbp
	je	.L28
	leaq	16(%rsp), %rcx
	leaq	8(%rsp), %rsi
	movq	%rsp, %rdi
	movq	%rbp, %r8
	leaq	24(%rsp), %r9
	movq	%r14, %rdx
	call	sgetrf_64_@PLT
	testq	%rbx, %rbx
	jle	.L29
	xorl	%eax, %eax
	.p2align 4,,10
	.p2align 3
.L30:
	movq	0(%rbp,%rax,8), %rdx
	movl	%edx, (%r12,%rax,4)
	addq	$1, %rax
	cmpq	%rax, %rbx
	jne	.L30
.L29:
	movq	%rbp, %rdi
	call	free@PLT
	movl	24(%rsp), %eax
.L28:
	movl	%eax, 0(%r13)
	addq	$32, %rsp
	popq	%rbx
	popq	%rbp
	popq	%r12
	popq	%r13
	popq	%r14
	ret
	.size	sgetrf_, .-sgetrf_
	.p2align 4
	.globl	dgetrf_
	.type	dgetrf_, @function
dgetrf_:
	pushq	%r14
	movq	%rdx, %r14
	pushq	%r13
	movq	%r9, %r13
	pushq	%r12
	movq	%r8, %r12
	pushq	%rbp
	pushq	%rbx
	subq	$32, %rsp
	movslq	(%rdi), %rbx
	movslq	(%rsi), %rax
	movq	$0, 24(%rsp)
	movslq	(%rcx), %rdx
	cmpq	%rax, %rbx
	movq	%rbx, (%rsp)
	cmovg	%rax, %rbx
	movq	%rax, 8(%rsp)
	movq	%rdx, 16(%rsp)
	movq	%rbx, %rdi
	call	wide.constprop.0
	movq	%rax, %rbp
	movl	$-1000, %eax
	testq	%rbp, %rbp
	je	.L37
	leaq	16(%rsp), %rcx
	leaq	8(%rsp), %rsi
	movq	%rsp, %rdi
	movq	%rbp, %r8
	leaq	24(%rsp), %r9
	movq	%r14, %rdx
	call	dgetrf_64_@PLT
	testq	%rbx, %rbx
	jle	.L38
	xorl	%eax, %eax
	.p2align 4,,10
	.p2align 3
.L39:
	movq	0(%rbp,%rax,8), %rdx
	movl	%edx, (%r12,%rax,4)
	addq	$1, %rax
	cmpq	%rax, %rbx
	jne	.L39
.L38:
	movq	%rbp, %rdi
	call	free@PLT
	movl	24(%rsp), %eax
.L37:
	movl	%eax, 0(%r13)
	addq	$32, %rsp
	popq	%rbx
	popq	%rbp
	popq	%r12
	popq	%r13
	popq	%r14
	ret
	.size	dgetrf_, .-dgetrf_
	.p2align 4
	.globl	sposv_
	.type	sposv_, @function
sposv_:
	subq	$56, %rsp
	movslq	(%rsi), %rax
	movq	$0, 40(%rsp)
	leaq	8(%rsp), %rsi
	movq	%rax, 8(%rsp)
	movslq	(%rdx), %rax
	leaq	16(%rsp), %rdx
	subq	$8, %rsp
	movq	%rax, 24(%rsp)
	movslq	(%r8), %rax
	movq	%rax, 32(%rsp)
	movq	72(%rsp), %rax
	movslq	(%rax), %rax
	movq	%rax, 40(%rsp)
	pushq	$1
	leaq	56(%rsp), %rax
	pushq	%rax
	leaq	56(%rsp), %rax
	pushq	%rax
	leaq	56(%rsp), %r8
	call	sposv_64_@PLT
	movq	104(%rsp), %rax
	movq	72(%rsp), %rdx
	movl	%edx, (%rax)
	addq	$88, %rsp
	ret
	.size	sposv_, .-sposv_
	.p2align 4
	.globl	dposv_
	.type	dposv_, @function
dposv_:
	subq	$56, %rsp
	movslq	(%rsi), %rax
	movq	$0, 40(%rsp)
	leaq	8(%rsp), %rsi
	movq	%rax, 8(%rsp)
	movslq	(%rdx), %rax
	leaq	16(%rsp), %rdx
	subq	$8, %rsp
	movq	%rax, 24(%rsp)
	movslq	(%r8), %rax
	movq	%rax, 32(%rsp)
	movq	72(%rsp), %rax
	movslq	(%rax), %rax
	movq	%rax, 40(%rsp)
	pushq	$1
	leaq	56(%rsp), %rax
	pushq	%rax
	leaq	56(%rsp), %rax
	pushq	%rax
	leaq	56(%rsp), %r8
	call	dposv_64_@PLT
	movq	104(%rsp), %rax
	movq	72(%rsp), %rdx
	movl	%edx, (%rax)
	addq	$88, %rsp
	ret
	.size	dposv_, .-dposv_
	.p2align 4
	.globl	spotrf_
	.type	spotrf_, @function
spotrf_:
	pushq	%rbx
	movl	$1, %r9d
	movq	%r8, %rbx
	subq	$32, %rsp
	movslq	(%rsi), %rax
	leaq	24(%rsp), %r8
	leaq	8(%rsp), %rsi
	movq	$0, 24(%rsp)
	movq	%rax, 8(%rsp)
	movslq	(%rcx), %rax
	leaq	16(%rsp), %rcx
	movq	%rax, 16(%rsp)
	call	spotrf_64_@PLT
	movq	24(%rsp), %rax
	movl	%eax, (%rbx)
	addq	$32, %rsp
	popq	%rbx
	ret
	.size	spotrf_, .-spotrf_
	.p2align 4
	.globl	dpotrf_
	.type	dpotrf_, @function
dpotrf_:
	pushq	%rbx
	movl	$1, %r9d
	movq	%r8, %rbx
	subq	$32, %rsp
	movslq	(%rsi), %rax
	leaq	24(%rsp), %r8
	leaq	8(%rsp), %rsi
	movq	$0, 24(%rsp)
	movq	%rax, 8(%rsp)
	movslq	(%rcx), %rax
	leaq	16(%rsp), %rcx
	movq	%rax, 16(%rsp)
	call	dpotrf_64_@PLT
	movq	24(%rsp), %rax
	movl	%eax, (%rbx)
	addq	$32, %rsp
	popq	%rbx
	ret
	.size	dpotrf_, .-dpotrf_
	.p2align 4
	.globl	sgeqrf_
	.type	sgeqrf_, @function
sgeqrf_:
	subq	$56, %rsp
	movslq	(%rdi), %rax
	movq	$0, 40(%rsp)
	leaq	8(%rsp), %rdi
	movq	%rax, 8(%rsp)
	movslq	(%rsi), %rax
	leaq	16(%rsp), %rsi
	movq	%rax, 16(%rsp)
	movslq	(%rcx), %rax
	leaq	24(%rsp), %rcx
	movq	%rax, 24(%rsp)
	movq	64(%rsp), %rax
	movslq	(%rax), %rax
	movq	%rax, 32(%rsp)
	leaq	40(%rsp), %rax
	pushq	%rax
	leaq	40(%rsp), %rax
	pushq	%rax
	call	sgeqrf_64_@PLT
	movq	88(%rsp), %rax
	movq	56(%rsp), %rdx
	movl	%edx, (%rax)
	addq	$72, %rsp
	ret
	.size	sgeqrf_, .-sgeqrf_
	.p2align 4
	.globl	dgeqrf_
	.type	dgeqrf_, @function
dgeqrf_:
	subq	$56, %rsp
	movslq	(%rdi), %rax
	movq	$0, 40(%rsp)
	leaq	8(%rsp), %rdi
	movq	%rax, 8(%rsp)
	movslq	(%rsi), %rax
	leaq	16(%rsp), %rsi
	movq	%rax, 16(%rsp)
	movslq	(%rcx), %rax
	leaq	24(%rsp), %rcx
	movq	%rax, 24(%rsp)
	movq	64(%rsp), %rax
	movslq	(%rax), %rax
	movq	%rax, 32(%rsp)
	leaq	40(%rsp), %rax
	pushq	%rax
	leaq	40(%rsp), %rax
	pushq	%rax
	call	dgeqrf_64_@PLT
	movq	88(%rsp), %rax
	movq	56(%rsp), %rdx
	movl	%edx, (%rax)
	addq	$72, %rsp
	ret
	.size	dgeqrf_, .-dgeqrf_
	.p2align 4
	.globl	sgels_
	.type	sgels_, @function
sgels_:
	subq	$72, %rsp
	movslq	(%rsi), %rax
	movq	$0, 56(%rsp)
	leaq	8(%rsp), %rsi
	movq	%rax, 8(%rsp)
	movslq	(%rdx), %rax
	leaq	16(%rsp), %rdx
	movq	%rax, 16(%rsp)
	movslq	(%rcx), %rax
	leaq	24(%rsp), %rcx
	movq	%rax, 24(%rsp)
	movslq	(%r9), %rax
	movq	%rax, 32(%rsp)
	movq	88(%rsp), %rax
	movslq	(%rax), %rax
	movq	%rax, 40(%rsp)
	movq	104(%rsp), %rax
	movslq	(%rax), %rax
	movq	%rax, 48(%rsp)
	pushq	$1
	leaq	64(%rsp), %rax
	pushq	%rax
	leaq	64(%rsp), %rax
	pushq	%rax
	pushq	120(%rsp)
	leaq	72(%rsp), %rax
	pushq	%rax
	pushq	120(%rsp)
	leaq	80(%rsp), %r9
	call	sgels_64_@PLT
	movq	160(%rsp), %rax
	movq	104(%rsp), %rdx
	movl	%edx, (%rax)
	addq	$120, %rsp
	ret
	.size	sgels_, .-sgels_
	.p2align 4
	.globl	dgels_
	.type	dgels_, @function
dgels_:
	subq	$72, %rsp
	movslq	(%rsi), %rax
	movq	$0, 56(%rsp)
	leaq	8(%rsp), %rsi
	movq	%rax, 8(%rsp)
	movslq	(%rdx), %rax
	leaq	16(%rsp), %rdx
	movq	%rax, 16(%rsp)
	movslq	(%rcx), %rax
	leaq	24(%rsp), %rcx
	movq	%rax, 24(%rsp)
	movslq	(%r9), %rax
	movq	%rax, 32(%rsp)
	movq	88(%rsp), %rax
	movslq	(%rax), %rax
	movq	%rax, 40(%rsp)
	movq	104(%rsp), %rax
	movslq	(%rax), %rax
	movq	%rax, 48(%rsp)
	pushq	$1
	leaq	64(%rsp), %rax
	pushq	%rax
	leaq	64(%rsp), %rax
	pushq	%rax
	pushq	120(%rsp)
	leaq	72(%rsp), %rax
	pushq	%rax
	pushq	120(%rsp)
	leaq	80(%rsp), %r9
	call	dgels_64_@PLT
	movq	160(%rsp), %rax
	movq	104(%rsp), %rdx
	movl	%edx, (%rax)
	addq	$120, %rsp
	ret
	.size	dgels_, .-dgels_
	.p2align 4
	.globl	sgesdd_
	.type	sgesdd_, @function
sgesdd_:
	pushq	%r13
	pushq	%r12
	movq	%r9, %r12
	pushq	%rbp
	movq	%rcx, %rbp
	pushq	%rbx
	movq	%rdi, %rbx
	subq	$72, %rsp
	movslq	(%rdx), %rax
	movslq	(%r8), %rdx
	movq	$0, 56(%rsp)
	movslq	(%rsi), %rdi
	movq	%rdx, 24(%rsp)
	movq	120(%rsp), %rdx
	cmpq	%rax, %rdi
	movq	%rdi, 8(%rsp)
	movslq	(%rdx), %rdx
	cmovg	%rax, %rdi
	movq	%rax, 16(%rsp)
	movq	%rdx, 32(%rsp)
	movq	136(%rsp), %rdx
	salq	$3, %rdi
	movslq	(%rdx), %rdx
	movq	%rdx, 40(%rsp)
	movq	152(%rsp), %rdx
	movslq	(%rdx), %rdx
	movq	%rdx, 48(%rsp)
	call	wide.constprop.0
	movq	%rax, %r13
	movl	$-1000, %eax
	testq	%r13, %r13
	je	.L62
	leaq	16(%rsp), %rdx
	leaq	8(%rsp), %rsi
	movq	%r12, %r9
	movq	%rbp, %rcx
	subq	$8, %rsp
	movq	%rbx, %rdi
	pushq	$1
	leaq	72(%rsp), %rax
	pushq	%rax
	pushq	%r13
	leaq	80(%rsp), %rax
	pushq	%rax
	pushq	184(%rsp)
	leaq	88(%rsp), %rax
	pushq	%rax
	pushq	184(%rsp)
	leaq	96(%rsp), %rax
	pushq	%rax
	pushq	184(%rsp)
	leaq	104(%rsp), %r8
	call	sgesdd_64_@PLT
	addq	$80, %rsp
	movq	%r13, %rdi
	call	free@PLT
	movl	56(%rsp), %eax
.L62:
	movq	168(%rsp), %rdx
	movl	%eax, (%rdx)
	addq	$72, %rsp
	popq	%rbx
	popq	%rbp
	popq	%r12
	popq	%r13
	ret
	.size	sgesdd_, .-sgesdd_
	.p2align 4
	.globl	dgesdd_
	.type	dgesdd_, @function
dgesdd_:
	pushq	%r13
	pushq	%r12
	movq	%r9, %r12
	pushq	%rbp
	movq	%rcx, %rbp
	pushq	%rbx
	movq	%rdi, %rbx
	subq	$72, %rsp
	movslq	(%rdx), %rax
	movslq	(%r8), %rdx
	movq	$0, 56(%rsp)
	movslq	(%rsi), %rdi
	movq	%rdx, 24(%rsp)
	movq	120(%rsp), %rdx
	cmpq	%rax, %rdi
	movq	%rdi, 8(%rsp)
	movslq	(%rdx), %rdx
	cmovg	%rax, %rdi
	movq	%rax, 16(%rsp)
	movq	%rdx, 32(%rsp)
	movq	136(%rsp), %rdx
	salq	$3, %rdi
	movslq	(%rdx), %rdx
	movq	%rdx, 40(%rsp)
	movq	152(%rsp), %rdx
	movslq	(%rdx), %rdx
	movq	%rdx, 48(%rsp)
	call	wide.constprop.0
	movq	%rax, %r13
	movl	$-1000, %eax
	testq	%r13, %r13
	je	.L68
	leaq	16(%rsp), %rdx
	leaq	8(%rsp), %rsi
	movq	%r12, %r9
	movq	%rbp, %rcx
	subq	$8, %rsp
	movq	%rbx, %rdi
	pushq	$1
	leaq	72(%rsp), %rax
	pushq	%rax
	pushq	%r13
	leaq	80(%rsp), %rax
	pushq	%rax
	pushq	184(%rsp)
	leaq	88(%rsp), %rax
	pushq	%rax
	pushq	184(%rsp)
	leaq	96(%rsp), %rax
	pushq	%rax
	pushq	184(%rsp)
	leaq	104(%rsp), %r8
	call	dgesdd_64_@PLT
	addq	$80, %rsp
	movq	%r13, %rdi
	call	free@PLT
	movl	56(%rsp), %eax
.L68:
	movq	168(%rsp), %rdx
	movl	%eax, (%rdx)
	addq	$72, %rsp
	popq	%rbx
	popq	%rbp
	popq	%r12
	popq	%r13
	ret
	.size	dgesdd_, .-dgesdd_
	.p2align 4
	.globl	dgeev_
	.type	dgeev_, @function
dgeev_:
	subq	$56, %rsp
	movslq	(%rdx), %rax
	movq	$0, 40(%rsp)
	movq	%rsp, %rdx
	movq	%rax, (%rsp)
	movslq	(%r8), %rax
	movq	%rax, 8(%rsp)
	movq	80(%rsp), %rax
	movslq	(%rax), %rax
	movq	%rax, 16(%rsp)
	movq	96(%rsp), %rax
	movslq	(%rax), %rax
	movq	%rax, 24(%rsp)
	movq	112(%rsp), %rax
	movslq	(%rax), %rax
	movq	%rax, 32(%rsp)
	pushq	$1
	pushq	$1
	leaq	56(%rsp), %rax
	pushq	%rax
	leaq	56(%rsp), %rax
	pushq	%rax
	pushq	136(%rsp)
	leaq	64(%rsp), %rax
	pushq	%rax
	pushq	136(%rsp)
	leaq	72(%rsp), %rax
	pushq	%rax
	pushq	136(%rsp)
	pushq	136(%rsp)
	leaq	88(%rsp), %r8
	call	dgeev_64_@PLT
	movq	200(%rsp), %rax
	movq	120(%rsp), %rdx
	movl	%edx, (%rax)
	addq	$136, %rsp
	ret
	.size	dgeev_, .-dgeev_
	.section	.note.GNU-stack,"",@progbits
