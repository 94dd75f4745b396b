//! JSON text as nlohmann::json's `dump()` writes it (llama.cpp writes the
//! literals of `const`, `enum` and property names with it): compact, object
//! keys in their stored order, control characters below 0x20 escaped
//! (`\b \t \n \f \r`, the rest `\u00xx` in lower-case hex), other
//! characters as UTF-8, integers as written, and floating-point numbers in
//! its format: the shortest digits that read back the same, fixed notation
//! for 1e-5 <= |x| < 1e15 with a `.0` where there is no fraction, otherwise
//! `d.ddde+XX` with at least two exponent digits.
//!
//! One known difference: nlohmann finds the digits with Grisu2, which for
//! rare doubles gives a longer (still round-tripping) digit string than the
//! shortest one Rust's formatter finds; a `const` or `enum` holding such a
//! number would be written with other digits. Integers and short decimals
//! (what schemas hold) are the same.
use serde_json::Value;

pub(super) fn dump(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                out.push_str(&i.to_string());
            } else if let Some(u) = n.as_u64() {
                out.push_str(&u.to_string());
            } else {
                dump_double(n.as_f64().unwrap_or(f64::NAN), out);
            }
        }
        Value::String(s) => dump_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                dump(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                dump_string(key, out);
                out.push(':');
                dump(item, out);
            }
            out.push('}');
        }
    }
}

pub(super) fn dump_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{08}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{0c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// nlohmann's `to_chars` layout of a finite double (JSON has no others).
fn dump_double(x: f64, out: &mut String) {
    if !x.is_finite() {
        out.push_str("null");
        return;
    }
    if x.is_sign_negative() {
        out.push('-');
    }
    let x = x.abs();
    if x == 0.0 {
        out.push_str("0.0");
        return;
    }
    // "d.ddde±x": the shortest round-tripping digits and the exponent of the first
    let sci = format!("{x:e}");
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let k = digits.len() as i32;
    // the decimal point's position counted from the first digit
    let n = exponent + 1;
    const MIN_EXP: i32 = -4;
    const MAX_EXP: i32 = 15;
    if k <= n && n <= MAX_EXP {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
        out.push_str(".0");
    } else if 0 < n && n <= MAX_EXP {
        out.push_str(&digits[..n as usize]);
        out.push('.');
        out.push_str(&digits[n as usize..]);
    } else if MIN_EXP < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(&digits);
    } else {
        out.push_str(&digits[..1]);
        if k > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let e = n - 1;
        out.push('e');
        out.push(if e < 0 { '-' } else { '+' });
        let magnitude = e.unsigned_abs();
        if magnitude < 10 {
            out.push('0');
        }
        out.push_str(&magnitude.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::dump;

    fn text(json: &str) -> String {
        let value: serde_json::Value = serde_json::from_str(json).unwrap();
        let mut out = String::new();
        dump(&value, &mut out);
        out
    }

    #[test]
    fn json_schema_dump_as_nlohmann() {
        assert_eq!(text(r#"{"b": [1, -2, 3.5], "a": null}"#), r#"{"b":[1,-2,3.5],"a":null}"#);
        assert_eq!(text("1.0"), "1.0");
        assert_eq!(text("-0.0"), "-0.0");
        assert_eq!(text("1e15"), "1e+15");
        assert_eq!(text("1e14"), "100000000000000.0");
        assert_eq!(text("0.0001"), "0.0001");
        assert_eq!(text("0.00001"), "1e-05");
        assert_eq!(text("1.5e-300"), "1.5e-300");
        assert_eq!(text("18446744073709551616"), "1.8446744073709552e+19");
        assert_eq!(text(r#""a\"b\\c\u0001\u007f\u00e9\n""#), "\"a\\\"b\\\\c\\u0001\u{7f}\u{e9}\\n\"");
    }
}
