package LughReference;

# Running the llama.cpp reference tools (built by bench/build-llama-reference
# into $LUGH_REF/VARIANT, default ~/.cache/lugh-ref/native) from the
# benchmark scripts and bench/make-reference.

use strict;
use warnings;
use Exporter 'import';
use File::Temp qw(tempdir);

our @EXPORT_OK = qw(reference_dir_tools run_reference no_amx_shim);

# The folder of a reference build: $LUGH_REF/VARIANT (VARIANT: native, the
# default, or avx2); $LUGH_REF/build for a native build made before variants.
sub reference_dir_tools {
    my ($variant) = @_;
    $variant //= 'native';
    my $ref = $ENV{LUGH_REF} // "$ENV{HOME}/.cache/lugh-ref";
    return "$ref/build" if $variant eq 'native' && !-d "$ref/native" && -d "$ref/build";
    return "$ref/$variant";
}

# The output of a reference command (a list: program and arguments; a first
# argument { stdin => FILE } feeds it that file; { stderr => 1 } keeps its
# stderr, after stdout), stderr dropped otherwise; undef when
# it fails. ggml's AMX kernels fault when built by GCC 12
# (the tile configuration is dropped), so a crashed run is retried with AMX
# refused by the kernel, which makes ggml use the AVX-512 kernels Lugh uses.
sub run_reference {
    my $options = ref $_[0] eq 'HASH' ? shift : {};
    my @cmd = @_;
    my $quoted = join ' ', map { quotemeta } @cmd;
    $quoted .= ' <' . quotemeta($options->{stdin}) if defined $options->{stdin};
    $quoted .= $options->{stderr} ? ' 2>&1' : ' 2>/dev/null';
    my $out = qx{$quoted};
    return $out if $? == 0;
    local $ENV{LD_PRELOAD} = no_amx_shim();
    $out = qx{$quoted};
    return $? == 0 ? $out : undef;
}

my $shim;
sub no_amx_shim {
    return $shim if $shim;
    my $dir = tempdir(CLEANUP => 1);
    open my $fh, '>', "$dir/noamx.c" or die $!;
    print $fh <<'C';
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <sys/syscall.h>
long syscall(long nr, ...) {
    va_list ap; va_start(ap, nr);
    long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
    long d = va_arg(ap, long), e = va_arg(ap, long), f = va_arg(ap, long);
    va_end(ap);
    if (nr == SYS_arch_prctl && a == 0x1023) { errno = EPERM; return -1; } /* ARCH_REQ_XCOMP_PERM */
    static long (*real)(long, ...);
    if (!real) real = (long (*)(long, ...)) dlsym(RTLD_NEXT, "syscall");
    return real(nr, a, b, c, d, e, f);
}
C
    close $fh;
    system('cc', '-shared', '-fPIC', '-O2', '-o', "$dir/noamx.so", "$dir/noamx.c", '-ldl') == 0
        or die "cannot build the no-AMX shim for the llama.cpp tools\n";
    return $shim = "$dir/noamx.so";
}

1;
