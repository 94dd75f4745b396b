//! The Perl glue: the only place that talks to perl's API. XS subs (in
//! `crate::subs`) read their arguments through [`Args`], call the engine, and
//! hand back a [`Ret`]; [`xsub`] turns errors and panics into croaks after
//! every Rust value has been dropped.
mod accessors;
mod callback;
mod convert;
pub mod ffi;
mod object;
mod options;
mod xsub;

pub use accessors::{accessor_names, read_accessor, Accessor};
pub use callback::call_callback_truth;
pub use convert::{Item, Perl};
pub use ffi::{Cv, Interp, Sv};
pub use object::{free_object, new_object, object_arc, LIVE_OBJECTS};
pub use options::{names, option_names, set, Given, Opt};
pub use xsub::{as_method, register, xsub, Args, Ret, XsError, XsResult};

/// Declares a package's XSUBs and the table that registers them:
///
/// ```ignore
/// xs_subs! { "Lugh::Model";
///     fn filename(args) { ... Ok(Ret::One(sv)) }
///     fn _open(args) as "Lugh::Model->new" { ... }
/// }
/// ```
/// Each `fn NAME(args)` becomes the perl sub `PACKAGE::NAME`, and `SUBS`
/// lists them all for boot. The body runs under [`xsub`]; errors are
/// prefixed with `PACKAGE::NAME`, or with the `as` name (the public method an
/// internal sub serves).
#[macro_export]
macro_rules! xs_subs {
    ($package:literal; $( fn $name:ident($args:ident) $(as $public:literal)? $body:block )*) => {
        $(
            unsafe extern "C" fn $name(p: $crate::glue::Interp, cv: $crate::glue::Cv) {
                let method = $crate::xs_subs!(@name $package, $name $(, $public)?);
                $crate::glue::xsub(p, cv, method, |$args: &$crate::glue::Args| -> $crate::glue::XsResult { $body })
            }
        )*
        pub const SUBS: &[(&str, $crate::glue::ffi::RustXsub)] = &[
            $( (concat!($package, "::", stringify!($name)), $name as $crate::glue::ffi::RustXsub) ),*
        ];
    };
    (@name $package:literal, $name:ident) => { concat!($package, "::", stringify!($name)) };
    (@name $package:literal, $name:ident, $public:literal) => { $public };
}
