package Lugh::Speculative;

use strict;
use warnings;

# The XS subs live in Lugh.so, which Lugh.pm loads (with every package), so
# that `use Lugh::Speculative;` alone works too.
require Lugh;

our $VERSION = '0.20';

# Settings and statistics: one accessor per row of the XS table.
Lugh::_install_accessors(__PACKAGE__);

# new, generate, step, draft_tokens, verify_tokens, init_caches, reset and
# reset_stats are XS subs (xs-rs/subs/speculative.rs).

# Objects hold native state that must not be copied into a new thread.
sub CLONE_SKIP { 1 }

1;
