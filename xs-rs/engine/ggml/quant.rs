//! ggml's data types as Lugh::Quant shows them: the type table, and
//! quantization / dequantization of plain f32 data with ggml's own codecs
//! (the ones llama-quantize uses, so the bytes are the same).
use crate::engine::ggml::sys::{self, GGML_TYPE_COUNT};
use crate::engine::Error;

/// What Lugh::Quant::type_info reports of one type.
#[derive(Clone, Debug, PartialEq)]
pub struct TypeInfo {
    pub id: u32,
    pub name: &'static str,
    /// Bytes per block.
    pub type_size: u64,
    /// Elements per block.
    pub block_size: u64,
    /// Bytes per element.
    pub sizef: f64,
    pub is_quantized: bool,
    pub requires_imatrix: bool,
    /// ggml can quantize f32 data to it without an importance matrix.
    pub can_quantize: bool,
    /// ggml can decode it to f32.
    pub can_dequantize: bool,
}

/// The types ggml_quantize_chunk (ggml.c, 0.26.0) has an encoder for.
/// Any other type makes it abort, so Lugh checks against this list first.
const CHUNK_QUANTIZABLE: &[&str] = &[
    "f32", "f16", "bf16", "q1_0", "q2_0", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "mxfp4", "nvfp4", "q2_K", "q3_K",
    "q4_K", "q5_K", "q6_K", "tq1_0", "tq2_0", "iq2_xxs", "iq2_xs", "iq3_xxs", "iq3_s", "iq2_s", "iq1_s", "iq1_m",
    "iq4_nl", "iq4_xs",
];

/// The table entry of a type id, or an error naming it ("Invalid type: N").
pub fn info(id: i64) -> Result<TypeInfo, Error> {
    let traits = u32::try_from(id).ok().and_then(|id| sys::type_traits(id).map(|t| (id, t))).ok_or_else(|| {
        Error::Argument(format!("Invalid type: {id} (not a ggml type id; see Lugh::Quant::all_types)"))
    })?;
    let (id, t) = traits;
    let requires_imatrix = sys::requires_imatrix(id);
    Ok(TypeInfo {
        id,
        name: t.name,
        type_size: t.type_size,
        block_size: t.block_size,
        sizef: sys::type_sizef(id),
        is_quantized: sys::is_quantized(id),
        requires_imatrix,
        can_quantize: !requires_imatrix && CHUNK_QUANTIZABLE.contains(&t.name),
        can_dequantize: sys::has_to_float(id) || t.name == "f32",
    })
}

/// Every type id ggml still knows (removed ids such as 4 and 5 are skipped).
pub fn all_types() -> Vec<u32> {
    (0..GGML_TYPE_COUNT).filter(|&id| sys::type_traits(id).is_some()).collect()
}

/// The type ids with block encodings.
pub fn all_quantized_types() -> Vec<u32> {
    all_types().into_iter().filter(|&id| sys::is_quantized(id)).collect()
}

/// The id of a type by its ggml name ("q4_K"; case-sensitive, as ggml
/// spells it), or None.
pub fn from_name(name: &str) -> Option<u32> {
    all_types().into_iter().find(|&id| sys::type_traits(id).is_some_and(|t| t.name == name))
}

/// The bytes of `n_rows` rows of `n_per_row` elements.
pub fn data_bytes(t: &TypeInfo, n_per_row: u64, n_rows: u64) -> Result<usize, Error> {
    if n_per_row % t.block_size != 0 {
        return Err(Error::Argument(format!(
            "a row of {n_per_row} elements is not a whole number of {} blocks ({} elements each)",
            t.name, t.block_size
        )));
    }
    let too_large = || {
        Error::Argument(format!(
            "{n_rows} rows of {n_per_row} {} values are too large: more bytes than this machine can address",
            t.name
        ))
    };
    let row = (n_per_row / t.block_size)
        .checked_mul(t.type_size)
        .filter(|&b| b <= isize::MAX as u64)
        .ok_or_else(too_large)?;
    row.checked_mul(n_rows).filter(|&b| b <= isize::MAX as u64).map(|b| b as usize).ok_or_else(too_large)
}

/// Encodes `values` (rows of `n_per_row`) as type `t`.
pub fn quantize(t: &TypeInfo, values: &[f32], n_per_row: usize) -> Result<Vec<u8>, Error> {
    if !t.can_quantize {
        let why = if t.requires_imatrix {
            "its quantizer needs an importance matrix"
        } else {
            "ggml has no quantizer for it"
        };
        return Err(Error::Argument(format!("cannot quantize to {}: {why}", t.name)));
    }
    if n_per_row == 0 || values.len() % n_per_row != 0 {
        return Err(Error::Argument(format!("{} values are not a whole number of rows of {n_per_row}", values.len())));
    }
    let n_rows = (values.len() / n_per_row) as u64;
    let bytes = data_bytes(t, n_per_row as u64, n_rows)?;
    // The block searches of the k-quants and i-quants assume finite input
    // (a NaN fails an assert inside ggml), so refuse it up front.
    if t.is_quantized {
        if let Some(i) = values.iter().position(|v| !v.is_finite()) {
            return Err(Error::Argument(format!("value {i} is {} and cannot be quantized to {}", values[i], t.name)));
        }
    }
    let mut out = vec![0u8; bytes];
    if !values.is_empty() {
        sys::quantize_rows(t.id, values, n_per_row, &mut out);
    }
    Ok(out)
}

/// Decodes `bytes` of type `t` (whole blocks) to f32.
pub fn dequantize(t: &TypeInfo, bytes: &[u8]) -> Result<Vec<f32>, Error> {
    if !t.can_dequantize {
        return Err(Error::Argument(format!("cannot dequantize {}: ggml has no decoder for it", t.name)));
    }
    if bytes.len() as u64 % t.type_size != 0 {
        return Err(Error::Argument(format!(
            "{} bytes are not a whole number of {} blocks ({} bytes each)",
            bytes.len(),
            t.name,
            t.type_size
        )));
    }
    let n = bytes.len() as u64 / t.type_size * t.block_size;
    let mut out = vec![0f32; n as usize];
    if t.name == "f32" {
        for (dst, src) in out.iter_mut().zip(bytes.chunks_exact(4)) {
            *dst = f32::from_le_bytes(src.try_into().expect("4 bytes"));
        }
    } else if n > 0 {
        sys::dequantize_row(t.id, bytes, &mut out);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn type_named(name: &str) -> TypeInfo {
        info(from_name(name).unwrap() as i64).unwrap()
    }

    #[test]
    fn table_matches_ggml() {
        let q4k = type_named("q4_K");
        assert_eq!((q4k.id, q4k.type_size, q4k.block_size, q4k.sizef), (12, 144, 256, 0.5625));
        assert!(q4k.is_quantized && q4k.can_quantize && q4k.can_dequantize);
        assert!(!type_named("f32").is_quantized);
        assert!(type_named("iq2_xxs").requires_imatrix && !type_named("iq2_xxs").can_quantize);
        assert!(!type_named("q8_K").can_quantize);
        assert!(info(4).is_err() && info(-1).is_err() && info(GGML_TYPE_COUNT as i64).is_err());
        assert_eq!(from_name("Q4_K"), None);
        assert!(all_quantized_types().iter().all(|&id| id != 0 && id != 1));
    }

    #[test]
    fn round_trip_error_follows_bits() {
        let n = 4096;
        let values: Vec<f32> = (0..n).map(|i| ((i * 7919) % 2001) as f32 / 1000.0 - 1.0).collect();
        let rmse = |name: &str| {
            let t = type_named(name);
            let back = dequantize(&t, &quantize(&t, &values, 256).unwrap()).unwrap();
            let se: f64 = values.iter().zip(&back).map(|(a, b)| f64::from(a - b).powi(2)).sum();
            (se / n as f64).sqrt()
        };
        let order = ["q8_0", "q6_K", "q5_K", "q4_K", "q3_K", "q2_K"].map(rmse);
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
        assert_eq!(rmse("f32"), 0.0);
    }

    #[test]
    fn bad_input_is_an_error() {
        let q4k = type_named("q4_K");
        assert!(quantize(&q4k, &[0.0; 100], 100).is_err()); // not whole blocks
        assert!(quantize(&q4k, &[f32::NAN; 256], 256).is_err());
        assert!(dequantize(&q4k, &[0u8; 100]).is_err());
    }
}
