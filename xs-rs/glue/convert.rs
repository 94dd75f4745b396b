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
    pub fn is_defined(self, sv: Sv) -> bool {
        // SAFETY: sv is a live SV from the stack or an array.
        unsafe { ffi::lugh_sv_ok(self.0, sv) != 0 }
    }

    pub fn is_true(self, sv: Sv) -> bool {
        // SAFETY: as above.
        unsafe { ffi::lugh_sv_true(self.0, sv) != 0 }
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

    /// A required string argument.
    pub fn string_arg(self, sv: Sv, what: &str) -> Result<String, Error> {
        if !self.is_defined(sv) {
            return Err(arg_error(what, "is missing (undef)".into()));
        }
        if self.ref_kind(sv) != 0 {
            return Err(arg_error(what, "must be a string, not a reference".into()));
        }
        Ok(self.text(sv))
    }

    /// A required integer argument.
    pub fn int_arg(self, sv: Sv, what: &str) -> Result<i64, Error> {
        if !self.is_defined(sv) {
            return Err(arg_error(what, "is missing (undef)".into()));
        }
        // SAFETY: sv is live.
        match unsafe { ffi::lugh_sv_number_kind(self.0, sv) } {
            1 if self.ref_kind(sv) == 0 => Ok(unsafe { ffi::lugh_sv_iv(self.0, sv) } as i64),
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
    }

    /// A required number argument.
    pub fn number_arg(self, sv: Sv, what: &str) -> Result<f64, Error> {
        if !self.is_defined(sv) {
            return Err(arg_error(what, "is missing (undef)".into()));
        }
        // SAFETY: sv is live.
        if unsafe { ffi::lugh_sv_number_kind(self.0, sv) } == 0 || self.ref_kind(sv) != 0 {
            return Err(arg_error(what, format!("must be a number, got '{}'", self.describe(sv))));
        }
        Ok(self.float_unchecked(sv))
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
        match self.ref_kind(sv) {
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
        if self.ref_kind(sv) != b'A' {
            return Err(arg_error(what, format!("must be an ARRAY reference, got {}", self.describe(sv))));
        }
        // SAFETY: sv is an array reference.
        let n = unsafe { ffi::lugh_av_count(self.0, sv) };
        Ok((0..n).map(|i| unsafe { ffi::lugh_av_fetch(self.0, sv, i) }).collect())
    }

    /// An array reference of integers, e.g. token ids.
    pub fn int_array_arg(self, sv: Sv, what: &str) -> Result<Vec<i64>, Error> {
        let items = self.array_arg(sv, what)?;
        items
            .into_iter()
            .enumerate()
            .map(|(i, item)| self.int_arg(item, &format!("{what} element {i}")))
            .collect()
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
        if !self.is_defined(sv) {
            return Ok(None);
        }
        if self.ref_kind(sv) != b'C' {
            return Err(arg_error(what, format!("must be a CODE reference, got {}", self.describe(sv))));
        }
        Ok(Some(sv))
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
