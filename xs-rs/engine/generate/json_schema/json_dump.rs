//! JSON text as nlohmann::json's `dump()` writes it (llama.cpp writes the
//! literals of `const`, `enum` and property names with it): compact, object
//! keys in their stored order, control characters below 0x20 escaped
//! (`\b \t \n \f \r`, the rest `\u00xx` in lower-case hex), other
//! characters as UTF-8, integers as written, and floating-point numbers in
//! its format: the shortest digits that read back the same, fixed notation
//! for 1e-5 <= |x| < 1e15 with a `.0` where there is no fraction, otherwise
//! `d.ddde+XX` with at least two exponent digits.
//!
//! The digits are Grisu2's (Loitsch, "Printing floating-point numbers
//! quickly and accurately with integers", 2010, as nlohmann implements it),
//! not the shortest ones: for about one double in 1,500 Grisu2 gives a
//! longer or differently rounded digit string (5.351715 is written
//! 5.3517150000000004), and llama.cpp's literal has those digits.
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
    let (digits, decimal_exponent) = grisu2(x);
    let k = digits.len() as i32;
    // the decimal point's position counted from the first digit
    let n = k + decimal_exponent;
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

/// A 64-bit significand with a binary exponent: f * 2^e.
#[derive(Clone, Copy)]
struct DiyFp {
    f: u64,
    e: i32,
}

impl DiyFp {
    fn sub(self, other: DiyFp) -> DiyFp {
        DiyFp { f: self.f - other.f, e: self.e }
    }

    /// The upper 64 bits of the 128-bit product, rounded half up.
    fn mul(self, other: DiyFp) -> DiyFp {
        let product = u128::from(self.f) * u128::from(other.f);
        let rounded = (product >> 64) as u64 + ((product >> 63) & 1) as u64;
        DiyFp { f: rounded, e: self.e + other.e + 64 }
    }

    fn normalize(self) -> DiyFp {
        let shift = self.f.leading_zeros();
        DiyFp { f: self.f << shift, e: self.e - shift as i32 }
    }

    fn normalize_to(self, e: i32) -> DiyFp {
        DiyFp { f: self.f << (self.e - e), e }
    }
}

/// 10^k for k = -300, -292, ..., 324 as normalized 64-bit significands
/// (rounded to nearest) and their binary exponents: Grisu's cached powers,
/// computed exactly with rationals.
const CACHED_POWERS: [(u64, i32); 79] = [
    (0xAB70FE17C79AC6CA, -1060), // 10^-300
    (0xFF77B1FCBEBCDC4F, -1034), // 10^-292
    (0xBE5691EF416BD60C, -1007), // 10^-284
    (0x8DD01FAD907FFC3C, -980),  // 10^-276
    (0xD3515C2831559A83, -954),  // 10^-268
    (0x9D71AC8FADA6C9B5, -927),  // 10^-260
    (0xEA9C227723EE8BCB, -901),  // 10^-252
    (0xAECC49914078536D, -874),  // 10^-244
    (0x823C12795DB6CE57, -847),  // 10^-236
    (0xC21094364DFB5637, -821),  // 10^-228
    (0x9096EA6F3848984F, -794),  // 10^-220
    (0xD77485CB25823AC7, -768),  // 10^-212
    (0xA086CFCD97BF97F4, -741),  // 10^-204
    (0xEF340A98172AACE5, -715),  // 10^-196
    (0xB23867FB2A35B28E, -688),  // 10^-188
    (0x84C8D4DFD2C63F3B, -661),  // 10^-180
    (0xC5DD44271AD3CDBA, -635),  // 10^-172
    (0x936B9FCEBB25C996, -608),  // 10^-164
    (0xDBAC6C247D62A584, -582),  // 10^-156
    (0xA3AB66580D5FDAF6, -555),  // 10^-148
    (0xF3E2F893DEC3F126, -529),  // 10^-140
    (0xB5B5ADA8AAFF80B8, -502),  // 10^-132
    (0x87625F056C7C4A8B, -475),  // 10^-124
    (0xC9BCFF6034C13053, -449),  // 10^-116
    (0x964E858C91BA2655, -422),  // 10^-108
    (0xDFF9772470297EBD, -396),  // 10^-100
    (0xA6DFBD9FB8E5B88F, -369),  // 10^-92
    (0xF8A95FCF88747D94, -343),  // 10^-84
    (0xB94470938FA89BCF, -316),  // 10^-76
    (0x8A08F0F8BF0F156B, -289),  // 10^-68
    (0xCDB02555653131B6, -263),  // 10^-60
    (0x993FE2C6D07B7FAC, -236),  // 10^-52
    (0xE45C10C42A2B3B06, -210),  // 10^-44
    (0xAA242499697392D3, -183),  // 10^-36
    (0xFD87B5F28300CA0E, -157),  // 10^-28
    (0xBCE5086492111AEB, -130),  // 10^-20
    (0x8CBCCC096F5088CC, -103),  // 10^-12
    (0xD1B71758E219652C, -77),   // 10^-4
    (0x9C40000000000000, -50),   // 10^4
    (0xE8D4A51000000000, -24),   // 10^12
    (0xAD78EBC5AC620000, 3),     // 10^20
    (0x813F3978F8940984, 30),    // 10^28
    (0xC097CE7BC90715B3, 56),    // 10^36
    (0x8F7E32CE7BEA5C70, 83),    // 10^44
    (0xD5D238A4ABE98068, 109),   // 10^52
    (0x9F4F2726179A2245, 136),   // 10^60
    (0xED63A231D4C4FB27, 162),   // 10^68
    (0xB0DE65388CC8ADA8, 189),   // 10^76
    (0x83C7088E1AAB65DB, 216),   // 10^84
    (0xC45D1DF942711D9A, 242),   // 10^92
    (0x924D692CA61BE758, 269),   // 10^100
    (0xDA01EE641A708DEA, 295),   // 10^108
    (0xA26DA3999AEF774A, 322),   // 10^116
    (0xF209787BB47D6B85, 348),   // 10^124
    (0xB454E4A179DD1877, 375),   // 10^132
    (0x865B86925B9BC5C2, 402),   // 10^140
    (0xC83553C5C8965D3D, 428),   // 10^148
    (0x952AB45CFA97A0B3, 455),   // 10^156
    (0xDE469FBD99A05FE3, 481),   // 10^164
    (0xA59BC234DB398C25, 508),   // 10^172
    (0xF6C69A72A3989F5C, 534),   // 10^180
    (0xB7DCBF5354E9BECE, 561),   // 10^188
    (0x88FCF317F22241E2, 588),   // 10^196
    (0xCC20CE9BD35C78A5, 614),   // 10^204
    (0x98165AF37B2153DF, 641),   // 10^212
    (0xE2A0B5DC971F303A, 667),   // 10^220
    (0xA8D9D1535CE3B396, 694),   // 10^228
    (0xFB9B7CD9A4A7443C, 720),   // 10^236
    (0xBB764C4CA7A44410, 747),   // 10^244
    (0x8BAB8EEFB6409C1A, 774),   // 10^252
    (0xD01FEF10A657842C, 800),   // 10^260
    (0x9B10A4E5E9913129, 827),   // 10^268
    (0xE7109BFBA19C0C9D, 853),   // 10^276
    (0xAC2820D9623BF429, 880),   // 10^284
    (0x80444B5E7AA7CF85, 907),   // 10^292
    (0xBF21E44003ACDD2D, 933),   // 10^300
    (0x8E679C2F5E44FF8F, 960),   // 10^308
    (0xD433179D9C8CB841, 986),   // 10^316
    (0x9E19DB92B4E31BA9, 1013),  // 10^324
];

/// The target range of the scaled exponent (Grisu2's alpha and gamma).
const ALPHA: i32 = -60;

/// Grisu2's digits of a finite positive double, with the power of ten the
/// last one stands for: value ~= digits * 10^exponent.
fn grisu2(value: f64) -> (String, i32) {
    let bits = value.to_bits();
    let biased_exponent = (bits >> 52) as i32;
    let fraction = bits & ((1u64 << 52) - 1);
    let v = if biased_exponent == 0 {
        DiyFp { f: fraction, e: 1 - 1075 }
    } else {
        DiyFp { f: fraction + (1u64 << 52), e: biased_exponent - 1075 }
    };
    // the boundaries halfway to the neighbouring doubles; the lower one is
    // closer at a power of two
    let lower_is_closer = fraction == 0 && biased_exponent > 1;
    let m_plus = DiyFp { f: 2 * v.f + 1, e: v.e - 1 }.normalize();
    let m_minus =
        if lower_is_closer { DiyFp { f: 4 * v.f - 1, e: v.e - 2 } } else { DiyFp { f: 2 * v.f - 1, e: v.e - 1 } };
    let m_minus = m_minus.normalize_to(m_plus.e);
    let v = v.normalize();

    // a cached power c = 10^-k that brings the exponent into [alpha, gamma]
    let f = ALPHA - m_plus.e - 1;
    let k = (f * 78913) / (1 << 18) + i32::from(f > 0);
    let index = ((300 + k + 7) / 8) as usize;
    let (cached_f, cached_e) = CACHED_POWERS[index];
    let cached_k = -300 + 8 * index as i32;
    let c = DiyFp { f: cached_f, e: cached_e };
    let w = v.mul(c);
    let w_minus = m_minus.mul(c);
    let w_plus = m_plus.mul(c);
    // the safe interval, shrunk by one unit each side for the rounding of mul
    let lower = DiyFp { f: w_minus.f + 1, e: w_minus.e };
    let upper = DiyFp { f: w_plus.f - 1, e: w_plus.e };

    let mut digits = String::new();
    let mut decimal_exponent = -cached_k;
    let mut delta = upper.sub(lower).f;
    let mut dist = upper.sub(w).f;
    let one_shift = (-upper.e) as u32;
    let one_f = 1u64 << one_shift;
    let mut p1 = (upper.f >> one_shift) as u32;
    let mut p2 = upper.f & (one_f - 1);

    // the integral digits
    let mut pow10: u32 = 1;
    let mut n = 1;
    while n < 10 && u64::from(pow10) * 10 <= u64::from(p1) {
        pow10 *= 10;
        n += 1;
    }
    while n > 0 {
        digits.push(char::from(b'0' + (p1 / pow10) as u8));
        p1 %= pow10;
        n -= 1;
        let rest = (u64::from(p1) << one_shift) + p2;
        if rest <= delta {
            decimal_exponent += n;
            round_last_digit(&mut digits, dist, delta, rest, u64::from(pow10) << one_shift);
            return (digits, decimal_exponent);
        }
        pow10 /= 10;
    }
    // the fractional digits, until the rest is within the interval
    let mut m = 0;
    loop {
        p2 *= 10;
        digits.push(char::from(b'0' + (p2 >> one_shift) as u8));
        p2 &= one_f - 1;
        m += 1;
        delta *= 10;
        dist *= 10;
        if p2 <= delta {
            break;
        }
    }
    decimal_exponent -= m;
    round_last_digit(&mut digits, dist, delta, p2, one_f);
    (digits, decimal_exponent)
}

/// Moves the last digit down while that brings the number closer to the
/// value and stays inside the interval (Grisu2's round_weed).
fn round_last_digit(digits: &mut String, dist: u64, delta: u64, mut rest: u64, ten_k: u64) {
    while rest < dist && delta - rest >= ten_k && (rest + ten_k < dist || dist - rest > rest + ten_k - dist) {
        let last = digits.pop().unwrap_or('1');
        digits.push(char::from(last as u8 - 1));
        rest += ten_k;
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
        // Grisu2's digits, not the shortest (checked with llama.cpp's converter)
        assert_eq!(text("5.351715"), "5.3517150000000004");
        assert_eq!(text("-555.637468821553"), "-555.6374688215531");
        assert_eq!(text("5.299064834871378e16"), "5.2990648348713776e+16");
        assert_eq!(text("1.7976931348623157e308"), "1.7976931348623157e+308");
        assert_eq!(text("5e-324"), "5e-324");
        assert_eq!(text("18446744073709551616"), "1.8446744073709552e+19");
        assert_eq!(text(r#""a\"b\\c\u0001\u007f\u00e9\n""#), "\"a\\\"b\\\\c\\u0001\u{7f}\u{e9}\\n\"");
    }
}
