//! The GBNF text for an integer between two bounds, digit by digit, as
//! llama.cpp b11434's `build_min_max_int` writes it (so that the text is
//! the same, its quirks included: `[0-9]{0}` where one digit budget is
//! used up, a bound wider than the digit budget written as is).
//!
//! `i64::MIN` as the minimum and `i64::MAX` as the maximum mean "no bound",
//! as in llama.cpp; a schema that spells out either value gets no bound
//! there. Negations wrap as two's complement (llama.cpp's `-min_value` on
//! x86), so an extreme bound gives the same text, never a panic.

/// The digit budget of an unbounded side: llama.cpp's `decimals_left`.
const DECIMALS: i32 = 16;

/// Writes the alternatives of an integer in `[minimum, maximum]` (without
/// the surrounding parentheses) to `out`.
pub(super) fn min_max_int(minimum: i64, maximum: i64, out: &mut String) {
    write_range(minimum, maximum, out, DECIMALS, true);
}

fn digit_range(from: u8, to: u8, out: &mut String) {
    out.push('[');
    out.push(from as char);
    if from != to {
        out.push('-');
        out.push(to as char);
    }
    out.push(']');
}

/// `[0-9]` repeated `min..=max` times, `i32::MAX` meaning no upper count.
fn more_digits(min_digits: i32, max_digits: i32, out: &mut String) {
    out.push_str("[0-9]");
    if min_digits == max_digits && min_digits == 1 {
        return;
    }
    out.push('{');
    out.push_str(&min_digits.to_string());
    if max_digits != min_digits {
        out.push(',');
        if max_digits != i32::MAX {
            out.push_str(&max_digits.to_string());
        }
    }
    out.push('}');
}

/// The numbers from `from` to `to`, two decimal strings of the same length
/// (llama.cpp also calls it with unequal lengths where a minimum exceeds the
/// maximum; the text is then what it writes, meaningless but finite).
fn uniform_range(from: &[u8], to: &[u8], out: &mut String) {
    let mut i = 0;
    while i < from.len() && i < to.len() && from[i] == to[i] {
        i += 1;
    }
    if i > 0 {
        out.push('"');
        out.push_str(std::str::from_utf8(&from[..i]).unwrap_or_default());
        out.push('"');
    }
    if i >= from.len() || i >= to.len() {
        return;
    }
    if i > 0 {
        out.push(' ');
    }
    let sub_len = from.len() - i - 1;
    if sub_len == 0 {
        out.push('[');
        out.push(from[i] as char);
        out.push('-');
        out.push(to[i] as char);
        out.push(']');
        return;
    }
    let from_sub = &from[i + 1..];
    let to_sub = &to[i + 1..];
    let zeros = vec![b'0'; sub_len];
    let nines = vec![b'9'; sub_len];
    let width = sub_len as i32;
    let mut to_reached = false;
    out.push('(');
    if from_sub == zeros.as_slice() {
        digit_range(from[i], to[i].wrapping_sub(1), out);
        out.push(' ');
        more_digits(width, width, out);
    } else {
        out.push('[');
        out.push(from[i] as char);
        out.push_str("] (");
        uniform_range(from_sub, &nines, out);
        out.push(')');
        if from[i] < to[i].wrapping_sub(1) {
            out.push_str(" | ");
            if to_sub == nines.as_slice() {
                digit_range(from[i] + 1, to[i], out);
                to_reached = true;
            } else {
                digit_range(from[i] + 1, to[i] - 1, out);
            }
            out.push(' ');
            more_digits(width, width, out);
        }
    }
    if !to_reached {
        out.push_str(" | ");
        digit_range(to[i], to[i], out);
        out.push(' ');
        uniform_range(&zeros, to_sub, out);
    }
    out.push(')');
}

fn write_range(mut min_value: i64, max_value: i64, out: &mut String, decimals_left: i32, top_level: bool) {
    let has_min = min_value != i64::MIN;
    let has_max = max_value != i64::MAX;

    if has_min && has_max {
        if min_value < 0 && max_value < 0 {
            out.push_str("\"-\" (");
            write_range(max_value.wrapping_neg(), min_value.wrapping_neg(), out, decimals_left, true);
            out.push(')');
            return;
        }
        if min_value < 0 {
            out.push_str("\"-\" (");
            write_range(0, min_value.wrapping_neg(), out, decimals_left, true);
            out.push_str(") | ");
            min_value = 0;
        }
        let mut min_s = min_value.to_string().into_bytes();
        let max_s = max_value.to_string().into_bytes();
        for digits in min_s.len()..max_s.len() {
            uniform_range(&min_s, &vec![b'9'; digits], out);
            min_s = std::iter::once(b'1').chain(std::iter::repeat_n(b'0', digits)).collect();
            out.push_str(" | ");
        }
        uniform_range(&min_s, &max_s, out);
        return;
    }

    let less_decimals = (decimals_left - 1).max(1);

    if has_min {
        if min_value < 0 {
            out.push_str("\"-\" (");
            write_range(i64::MIN, min_value.wrapping_neg(), out, decimals_left, false);
            out.push_str(") | [0] | [1-9] ");
            more_digits(0, decimals_left - 1, out);
        } else if min_value == 0 {
            if top_level {
                out.push_str("[0] | [1-9] ");
                more_digits(0, less_decimals, out);
            } else {
                more_digits(1, decimals_left, out);
            }
        } else if min_value <= 9 {
            let c = b'0' + min_value as u8;
            let range_start = if top_level { b'1' } else { b'0' };
            if c > range_start {
                digit_range(range_start, c - 1, out);
                out.push(' ');
                more_digits(1, less_decimals, out);
                out.push_str(" | ");
            }
            digit_range(c, b'9', out);
            out.push(' ');
            more_digits(0, less_decimals, out);
        } else {
            let min_s = min_value.to_string().into_bytes();
            let len = min_s.len() as i32;
            let c = min_s[0];
            if c > b'1' {
                digit_range(if top_level { b'1' } else { b'0' }, c - 1, out);
                out.push(' ');
                more_digits(len, less_decimals, out);
                out.push_str(" | ");
            }
            digit_range(c, c, out);
            out.push_str(" (");
            // the digits after the first, as a number (leading zeros dropped)
            let rest: i64 = std::str::from_utf8(&min_s[1..]).ok().and_then(|s| s.parse().ok()).unwrap_or(0);
            write_range(rest, i64::MAX, out, less_decimals, false);
            out.push(')');
            if c < b'9' {
                out.push_str(" | ");
                digit_range(c + 1, b'9', out);
                out.push(' ');
                more_digits(len - 1, less_decimals, out);
            }
        }
        return;
    }

    if has_max {
        if max_value >= 0 {
            if top_level {
                out.push_str("\"-\" [1-9] ");
                more_digits(0, less_decimals, out);
                out.push_str(" | ");
            }
            write_range(0, max_value, out, decimals_left, true);
        } else {
            out.push_str("\"-\" (");
            write_range(max_value.wrapping_neg(), i64::MAX, out, decimals_left, false);
            out.push(')');
        }
    }
    // neither bound: the caller writes the plain integer rule instead
}

#[cfg(test)]
mod tests {
    use super::min_max_int;

    fn range(min: i64, max: i64) -> String {
        let mut out = String::new();
        min_max_int(min, max, &mut out);
        out
    }

    #[test]
    fn json_schema_integer_ranges_small() {
        assert_eq!(range(0, i64::MAX), "[0] | [1-9] [0-9]{0,15}");
        assert_eq!(range(1, i64::MAX), "[1-9] [0-9]{0,15}");
        assert_eq!(range(3, i64::MAX), "[1-2] [0-9]{1,15} | [3-9] [0-9]{0,15}");
        assert_eq!(range(10, i64::MAX), "[1] ([0-9]{1,15}) | [2-9] [0-9]{1,15}");
        assert_eq!(range(i64::MIN, 0), "\"-\" [1-9] [0-9]{0,15} | \"0\"");
        assert_eq!(range(-5, i64::MAX), "\"-\" ([0-5]) | [0] | [1-9] [0-9]{0,15}");
    }
}
