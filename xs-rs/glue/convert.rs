//! Converting between perl values and Rust values.
use super::ffi::{self, Interp, Sv};
use crate::engine::Error;

/// A handle on the running interpreter, with the conversions XS subs need.
/// Values it makes are mortal: perl frees them when the statement ends.
#[derive(Clone, Copy)]
pub struct Perl(pub Interp);

fn arg_error(what: &str, problem: String) -> Error {
    Error::Argument(format!("{what} {problem}"))
}

impl Perl {
    /// Err when reading a value since the last check ran perl code (a tied
    /// FETCH, an overload) that died. The shim catches such a die instead of
    /// letting it longjmp over Rust frames, and the read answers a neutral
    /// value, so every conversion below ends with this check.
    pub fn check(self, what: &str) -> Result<(), Error> {
        match self.take_error() {
            None => Ok(()),
            Some(err) => {
                let message = self.text(err);
                // Stringifying an exception object may itself die: that is not news.
                let _ = self.take_error();
                let message = message.trim_end();
                let message = if message.is_empty() { "an exception object" } else { message };
                Err(arg_error(what, format!("died when read: {message}")))
            }
        }
    }

    /// The pending error a guarded read caught, if any (mortal).
    pub fn take_error(self) -> Option<Sv> {
        // SAFETY: empties this thread's slot; the SV returned is mortal.
        let sv = unsafe { ffi::lugh_take_error(self.0) };
        (!sv.0.is_null()).then_some(sv)
    }

    /// `convert()`, then the check for a read that died (which wins: the
    /// value read was a neutral stand-in).
    fn checked<T>(self, what: &str, convert: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
        let result = convert();
        self.check(what)?;
        result
    }

    pub fn is_defined(self, sv: Sv) -> bool {
        // SAFETY: sv is a live SV from the stack or an array.
        unsafe { ffi::lugh_sv_ok(self.0, sv) != 0 }
    }

    pub fn is_true(self, sv: Sv) -> bool {
        // SAFETY: as above.
        unsafe { ffi::lugh_sv_true(self.0, sv) != 0 }
    }

    /// A flag: the value's truth (which may run a `bool` overload).
    pub fn bool_arg(self, sv: Sv, what: &str) -> Result<bool, Error> {
        self.checked(what, || Ok(self.is_true(sv)))
    }

    /// The raw string buffer and whether perl holds it as UTF-8.
    pub fn raw_str(self, sv: Sv) -> (&'static [u8], bool) {
        let mut len = 0usize;
        let mut utf8 = 0;
        // SAFETY: perl returns a buffer valid until the SV changes; callers
        // copy it before calling back into perl.
        unsafe {
            let ptr = ffi::lugh_sv_pv(self.0, sv, &mut len, &mut utf8);
            (std::slice::from_raw_parts(ptr.cast::<u8>(), len), utf8 != 0)
        }
    }

    /// The value as a Rust string of characters (perl's text semantics:
    /// a byte string is Latin-1, an upgraded string is its characters).
    pub fn text(self, sv: Sv) -> String {
        let (bytes, utf8) = self.raw_str(sv);
        if utf8 {
            String::from_utf8_lossy(bytes).into_owned()
        } else {
            bytes.iter().map(|&b| b as char).collect()
        }
    }

    /// Text as UTF-8 bytes, by one rule whether or not perl holds the string
    /// upgraded: its characters, except that a string of characters below
    /// 0x100 which spell valid UTF-8 is taken as those UTF-8 bytes (so text
    /// read without a decoding layer works too). Characters beyond U+10FFFF
    /// are refused. The result borrows perl's buffer: use it before calling
    /// back into perl.
    pub fn utf8_text_arg(self, sv: Sv, what: &str) -> Result<std::borrow::Cow<'static, [u8]>, Error> {
        self.checked(what, || {
            use std::borrow::Cow;
            if !self.is_defined(sv) {
                return Err(arg_error(what, "is missing (undef)".into()));
            }
            if self.ref_kind(sv) != 0 {
                return Err(arg_error(what, "must be a string, not a reference".into()));
            }
            let (bytes, utf8) = self.raw_str(sv);
            let narrow: Cow<'static, [u8]> = if utf8 {
                match perl_utf8_chars(bytes) {
                    Err(cpt) => return Err(arg_error(what, format!("has character U+{cpt:X}, beyond Unicode"))),
                    Ok(true) => return Ok(Cow::Borrowed(bytes)),
                    Ok(false) => Cow::Owned(latin1_of_utf8(bytes)),
                }
            } else {
                Cow::Borrowed(bytes)
            };
            if std::str::from_utf8(&narrow).is_ok() {
                return Ok(narrow);
            }
            Ok(Cow::Owned(narrow.iter().flat_map(|&b| char::from(b).to_string().into_bytes()).collect()))
        })
    }

    /// A byte string (characters above 0xFF are refused).
    pub fn byte_string_arg(self, sv: Sv, what: &str) -> Result<std::borrow::Cow<'static, [u8]>, Error> {
        self.checked(what, || {
            use std::borrow::Cow;
            if !self.is_defined(sv) || self.ref_kind(sv) != 0 {
                return Err(arg_error(what, format!("must be a string, got {}", self.describe(sv))));
            }
            let (bytes, utf8) = self.raw_str(sv);
            if !utf8 {
                return Ok(Cow::Borrowed(bytes));
            }
            match perl_utf8_chars(bytes) {
                Ok(false) => Ok(Cow::Owned(latin1_of_utf8(bytes))),
                _ => Err(arg_error(what, "must be a byte string, but has characters above 0xFF".into())),
            }
        })
    }

    /// A required string argument.
    pub fn string_arg(self, sv: Sv, what: &str) -> Result<String, Error> {
        self.checked(what, || {
            if !self.is_defined(sv) {
                return Err(arg_error(what, "is missing (undef)".into()));
            }
            if self.ref_kind(sv) != 0 {
                return Err(arg_error(what, "must be a string, not a reference".into()));
            }
            Ok(self.text(sv))
        })
    }

    /// A file name: the string's bytes as they are (file names are bytes),
    /// or its UTF-8 when it has characters above 0xFF (which can only be
    /// meant as UTF-8). It may be empty.
    pub fn path_arg(self, sv: Sv, what: &str) -> Result<std::path::PathBuf, Error> {
        use std::os::unix::ffi::OsStrExt;
        self.checked(what, || {
            if !self.is_defined(sv) || self.ref_kind(sv) != 0 {
                return Err(arg_error(what, format!("must be a file name, got {}", self.describe(sv))));
            }
            let text = self.text(sv);
            let bytes: Vec<u8> = if text.chars().all(|c| (c as u32) < 256) {
                text.chars().map(|c| c as u8).collect()
            } else {
                text.into_bytes()
            };
            Ok(std::path::PathBuf::from(std::ffi::OsStr::from_bytes(&bytes)))
        })
    }

    /// The class a constructor blesses into (a subclass name is fine).
    pub fn class_arg(self, sv: Sv) -> Result<String, Error> {
        let class = if self.ref_kind(sv) != 0 {
            self.checked("class", || {
                Err(arg_error("class", "must be a class name, not an object or reference".into()))
            })?
        } else {
            self.string_arg(sv, "class")?
        };
        if class.is_empty() || class.contains('\0') {
            return Err(arg_error("class", format!("must be a package name, got {class:?}")));
        }
        Ok(class)
    }

    /// A required integer argument.
    pub fn int_arg(self, sv: Sv, what: &str) -> Result<i64, Error> {
        self.checked(what, || {
            if !self.is_defined(sv) {
                return Err(arg_error(what, "is missing (undef)".into()));
            }
            // SAFETY: sv is live.
            match unsafe { ffi::lugh_sv_number_kind(self.0, sv) } {
                1 if self.ref_kind(sv) == 0 => {
                    // SAFETY: sv is live.
                    let v = unsafe { ffi::lugh_sv_iv(self.0, sv) } as i64;
                    if v < 0 && self.float_unchecked(sv) >= 0.0 {
                        // an unsigned integer above i64::MAX, which SvIV wraps
                        return Err(arg_error(what, format!("must be an integer below 2**63, got {}", self.text(sv))));
                    }
                    Ok(v)
                }
                2 => {
                    let v = self.float_unchecked(sv);
                    if v.fract() == 0.0 && v.abs() < 9.0e18 {
                        Ok(v as i64)
                    } else {
                        Err(arg_error(what, format!("must be an integer, got {v}")))
                    }
                }
                _ => Err(arg_error(what, format!("must be an integer, got '{}'", self.describe(sv)))),
            }
        })
    }

    /// A required integer in `min..=max`, checked before any cast (so a
    /// negative count never wraps to a huge usize).
    pub fn ranged_arg(self, sv: Sv, what: &str, min: i64, max: i64) -> Result<usize, Error> {
        let v = self.int_arg(sv, what)?;
        if v < min {
            return Err(Error::Argument(format!("{what} must be an integer >= {min}, got {v}")));
        }
        if v > max {
            return Err(Error::Argument(format!("{what} must be an integer <= {max}, got {v}")));
        }
        Ok(v as usize)
    }

    /// A required number argument.
    pub fn number_arg(self, sv: Sv, what: &str) -> Result<f64, Error> {
        self.checked(what, || {
            if !self.is_defined(sv) {
                return Err(arg_error(what, "is missing (undef)".into()));
            }
            // SAFETY: sv is live.
            if unsafe { ffi::lugh_sv_number_kind(self.0, sv) } == 0 || self.ref_kind(sv) != 0 {
                return Err(arg_error(what, format!("must be a number, got '{}'", self.describe(sv))));
            }
            Ok(self.float_unchecked(sv))
        })
    }

    fn float_unchecked(self, sv: Sv) -> f64 {
        // SAFETY: sv is live.
        unsafe { ffi::lugh_sv_nv(self.0, sv) }
    }

    /// A short rendering of a value for error messages.
    pub fn describe(self, sv: Sv) -> String {
        if !self.is_defined(sv) {
            return "undef".into();
        }
        let kind = self.ref_kind(sv);
        // SAFETY: sv is live; ref_kind above ran its get magic.
        let class = unsafe { ffi::lugh_sv_blessed(self.0, sv) };
        if kind != 0 && !class.is_null() {
            // SAFETY: perl's class names are NUL-terminated and outlive this call.
            let class = unsafe { std::ffi::CStr::from_ptr(class) }.to_string_lossy();
            return format!("a {class} object");
        }
        match kind {
            0 => {
                let mut t = self.text(sv);
                if t.chars().count() > 40 {
                    t = t.chars().take(40).collect::<String>() + "...";
                }
                t
            }
            b'A' => "ARRAY reference".into(),
            b'H' => "HASH reference".into(),
            b'C' => "CODE reference".into(),
            _ => "reference".into(),
        }
    }

    /// 0 for a plain scalar, else b'A', b'H', b'C' or b'S'.
    pub fn ref_kind(self, sv: Sv) -> u8 {
        // SAFETY: sv is live.
        unsafe { ffi::lugh_sv_ref_kind(self.0, sv) as u8 }
    }

    /// The elements of an array reference.
    pub fn array_arg(self, sv: Sv, what: &str) -> Result<Vec<Sv>, Error> {
        self.checked(what, || {
            if self.ref_kind(sv) != b'A' {
                return Err(arg_error(what, format!("must be an ARRAY reference, got {}", self.describe(sv))));
            }
            // SAFETY: sv is an array reference.
            let n = unsafe { ffi::lugh_av_count(self.0, sv) };
            Ok((0..n).map(|i| unsafe { ffi::lugh_av_fetch(self.0, sv, i) }).collect())
        })
    }

    /// A hash reference's (key, value) pairs, in the hash's order.
    pub fn hash_arg(self, sv: Sv, what: &str) -> Result<Vec<(String, Sv)>, Error> {
        self.checked(what, || {
            if self.ref_kind(sv) != b'H' {
                return Err(arg_error(what, format!("must be a HASH reference, got {}", self.describe(sv))));
            }
            // SAFETY: sv is a hash reference.
            let pairs = unsafe { ffi::lugh_hv_pairs(self.0, sv) };
            if self.ref_kind(pairs) != b'A' {
                return Err(arg_error(what, "could not be read".into()));
            }
            let items = self.array_arg(pairs, what)?;
            items.chunks_exact(2).map(|kv| Ok((self.text(kv[0]), kv[1]))).collect()
        })
    }

    /// An array reference of integers, e.g. token ids.
    pub fn int_array_arg(self, sv: Sv, what: &str) -> Result<Vec<i64>, Error> {
        let items = self.array_arg(sv, what)?;
        items.into_iter().enumerate().map(|(i, item)| self.int_arg(item, &format!("{what} element {i}"))).collect()
    }

    /// An array reference of numbers, e.g. logits.
    pub fn float_array_arg(self, sv: Sv, what: &str) -> Result<Vec<f32>, Error> {
        let items = self.array_arg(sv, what)?;
        items
            .into_iter()
            .enumerate()
            .map(|(i, item)| self.number_arg(item, &format!("{what} element {i}")).map(|v| v as f32))
            .collect()
    }

    /// An array reference of token ids, each in [0, n_vocab).
    pub fn token_array_arg(self, sv: Sv, what: &str, n_vocab: usize) -> Result<Vec<i32>, Error> {
        let ids = self.int_array_arg(sv, what)?;
        ids.iter()
            .enumerate()
            .map(|(pos, &id)| {
                if id >= 0 && (id as u64) < n_vocab as u64 {
                    Ok(id as i32)
                } else {
                    Err(arg_error(what, format!("has token id {id} at position {pos}, out of range [0, {n_vocab})")))
                }
            })
            .collect()
    }

    /// A code reference (a callback), or None for undef.
    pub fn code_arg(self, sv: Sv, what: &str) -> Result<Option<Sv>, Error> {
        self.checked(what, || {
            if !self.is_defined(sv) {
                return Ok(None);
            }
            if self.ref_kind(sv) != b'C' {
                return Err(arg_error(what, format!("must be a CODE reference, got {}", self.describe(sv))));
            }
            Ok(Some(sv))
        })
    }

    pub fn undef(self) -> Sv {
        // SAFETY: returns the immortal undef.
        unsafe { ffi::lugh_undef(self.0) }
    }

    pub fn int(self, v: i64) -> Sv {
        // SAFETY: makes a new mortal.
        unsafe { ffi::lugh_new_iv(self.0, v as isize) }
    }

    pub fn uint(self, v: u64) -> Sv {
        // SAFETY: makes a new mortal.
        unsafe { ffi::lugh_new_uv(self.0, v as usize) }
    }

    pub fn float(self, v: f64) -> Sv {
        // SAFETY: makes a new mortal.
        unsafe { ffi::lugh_new_nv(self.0, v) }
    }

    pub fn bool(self, v: bool) -> Sv {
        // SAFETY: returns an immortal yes/no.
        unsafe { ffi::lugh_new_bool(self.0, v as i32) }
    }

    /// A character string (flagged UTF-8).
    pub fn str(self, s: &str) -> Sv {
        // SAFETY: perl copies the bytes.
        unsafe { ffi::lugh_new_str(self.0, s.as_ptr().cast(), s.len()) }
    }

    /// A byte string (not flagged UTF-8).
    pub fn bytes(self, b: &[u8]) -> Sv {
        // SAFETY: perl copies the bytes.
        unsafe { ffi::lugh_new_bytes(self.0, b.as_ptr().cast(), b.len()) }
    }

    pub fn array_ref(self, items: &[Sv]) -> Sv {
        // SAFETY: perl copies each value into the new array.
        unsafe { ffi::lugh_new_array_ref(self.0, items.as_ptr(), items.len() as isize) }
    }

    pub fn float_array_ref(self, items: &[f32]) -> Sv {
        // SAFETY: perl copies the numbers.
        unsafe { ffi::lugh_new_float_array_ref(self.0, items.as_ptr(), items.len() as isize) }
    }

    pub fn int_array_ref(self, items: &[i64]) -> Sv {
        // SAFETY: perl copies the numbers.
        unsafe { ffi::lugh_new_int_array_ref(self.0, items.as_ptr(), items.len() as isize) }
    }

    /// A new, empty array reference to fill with the `push_*` methods.
    pub fn new_array(self, reserve: usize) -> Sv {
        // SAFETY: makes a new mortal reference.
        unsafe { ffi::lugh_new_av_ref(self.0, reserve as isize) }
    }

    /// Appends to an array made by `new_array`.
    pub fn push(self, array: Sv, item: Item<'_>) {
        // SAFETY: array is a live array reference made by new_array.
        unsafe {
            match item {
                Item::Sv(v) => ffi::lugh_av_push_sv(self.0, array, v),
                Item::Int(v) => ffi::lugh_av_push_iv(self.0, array, v as isize),
                Item::Uint(v) => ffi::lugh_av_push_uv(self.0, array, v as usize),
                Item::Float(v) => ffi::lugh_av_push_nv(self.0, array, v),
                Item::Str(s) => ffi::lugh_av_push_str(self.0, array, s.as_ptr().cast(), s.len()),
            }
        }
    }
}

/// One element to push onto a perl array.
pub enum Item<'a> {
    Sv(Sv),
    Int(i64),
    Uint(u64),
    Float(f64),
    Str(&'a str),
}

/// Scans perl's internal UTF-8 (which may hold surrogates and code points
/// beyond Unicode): Ok(true) if some character is above 0xFF, Ok(false) if
/// all are below 0x100, Err(code point) for one beyond U+10FFFF.
fn perl_utf8_chars(bytes: &[u8]) -> Result<bool, u64> {
    let mut wide = false;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let len = match b {
            0x00..=0x7F => 1,
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            0xF8..=0xFB => 5,
            0xFC..=0xFD => 6,
            _ => 7,
        };
        if len > 1 {
            let mut cpt: u64 = if len >= 7 { 0 } else { (b & (0x7F >> len)) as u64 };
            for &c in bytes.iter().skip(i + 1).take(len.min(13) - 1) {
                cpt = (cpt << 6) | (c & 0x3F) as u64;
            }
            if len >= 4 && (cpt > 0x10FFFF || len > 4) {
                return Err(cpt.max(0x110000));
            }
            wide |= cpt > 0xFF;
        }
        i += len;
    }
    Ok(wide)
}

/// Characters below 0x100 held as UTF-8 → their bytes.
fn latin1_of_utf8(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b < 0x80 {
            out.push(b);
            i += 1;
        } else {
            out.push(((b & 0x03) << 6) | (bytes.get(i + 1).copied().unwrap_or(0) & 0x3F));
            i += 2;
        }
    }
    out
}
