//! XS subs of Lugh::Quant: ggml's type table, quantize and dequantize.
use crate::engine::ggml::quant::{self, TypeInfo};
use crate::engine::Error;
use crate::glue::{Args, Perl, Ret, Sv};
use crate::xs_subs;

fn type_arg(perl: Perl, sv: Sv) -> Result<TypeInfo, Error> {
    quant::info(perl.int_arg(sv, "type")?)
}

/// A type id that may be out of range: None for an unknown one.
fn maybe_type(args: &Args) -> Result<Option<TypeInfo>, Error> {
    Ok(quant::info(args.perl().int_arg(args.get(0), "type")?).ok())
}

xs_subs! { "Lugh::Quant";
    fn _type_constants(args) as "Lugh::Quant::_type_constants" {
        args.expect(0, 0, "")?;
        let perl = args.perl();
        let mut out = Vec::new();
        for id in quant::all_types() {
            let t = quant::info(i64::from(id))?;
            out.push(perl.str(&t.name.to_ascii_uppercase()));
            out.push(perl.int(i64::from(id)));
        }
        Ok(Ret::List(out))
    }

    fn type_name(args) as "Lugh::Quant::type_name" {
        args.expect(1, 1, "type")?;
        let name = maybe_type(args)?.map_or("unknown", |t| t.name);
        Ok(Ret::One(args.perl().str(name)))
    }

    fn is_quantized(args) as "Lugh::Quant::is_quantized" {
        args.expect(1, 1, "type")?;
        Ok(Ret::One(args.perl().bool(maybe_type(args)?.is_some_and(|t| t.is_quantized))))
    }

    fn type_size(args) as "Lugh::Quant::type_size" {
        args.expect(1, 1, "type")?;
        let perl = args.perl();
        Ok(Ret::One(perl.uint(type_arg(perl, args.get(0))?.type_size)))
    }

    fn blck_size(args) as "Lugh::Quant::blck_size" {
        args.expect(1, 1, "type")?;
        let perl = args.perl();
        Ok(Ret::One(perl.uint(type_arg(perl, args.get(0))?.block_size)))
    }

    fn type_sizef(args) as "Lugh::Quant::type_sizef" {
        args.expect(1, 1, "type")?;
        let perl = args.perl();
        Ok(Ret::One(perl.float(type_arg(perl, args.get(0))?.sizef)))
    }

    fn requires_imatrix(args) as "Lugh::Quant::requires_imatrix" {
        args.expect(1, 1, "type")?;
        let perl = args.perl();
        Ok(Ret::One(perl.bool(type_arg(perl, args.get(0))?.requires_imatrix)))
    }

    fn can_quantize(args) as "Lugh::Quant::can_quantize" {
        args.expect(1, 1, "type")?;
        Ok(Ret::One(args.perl().bool(maybe_type(args)?.is_some_and(|t| t.can_quantize))))
    }

    fn row_size(args) as "Lugh::Quant::row_size" {
        args.expect(2, 2, "type, n")?;
        let perl = args.perl();
        let t = type_arg(perl, args.get(0))?;
        let n = perl.int_arg(args.get(1), "n")?;
        if n < 0 {
            return Err(Error::Argument(format!("n must be >= 0, got {n}")).into());
        }
        Ok(Ret::One(perl.uint(quant::data_bytes(&t, n as u64, 1)? as u64)))
    }

    fn type_count(args) as "Lugh::Quant::type_count" {
        args.expect(0, 0, "")?;
        Ok(Ret::One(args.perl().int(i64::from(crate::engine::ggml::sys::GGML_TYPE_COUNT))))
    }

    fn all_types(args) as "Lugh::Quant::all_types" {
        args.expect(0, 0, "")?;
        let perl = args.perl();
        Ok(Ret::List(quant::all_types().into_iter().map(|id| perl.int(i64::from(id))).collect()))
    }

    fn all_quantized_types(args) as "Lugh::Quant::all_quantized_types" {
        args.expect(0, 0, "")?;
        let perl = args.perl();
        Ok(Ret::List(quant::all_quantized_types().into_iter().map(|id| perl.int(i64::from(id))).collect()))
    }

    fn type_from_name(args) as "Lugh::Quant::type_from_name" {
        args.expect(1, 1, "name")?;
        let perl = args.perl();
        let name = perl.string_arg(args.get(0), "name")?;
        Ok(Ret::One(perl.int(quant::from_name(&name).map_or(-1, i64::from))))
    }

    fn _type_info(args) as "Lugh::Quant::type_info" {
        args.expect(1, 1, "type")?;
        let perl = args.perl();
        let t = type_arg(perl, args.get(0))?;
        Ok(Ret::List(vec![
            perl.str("type"), perl.int(i64::from(t.id)),
            perl.str("name"), perl.str(t.name),
            perl.str("size"), perl.uint(t.type_size),
            perl.str("blck_size"), perl.uint(t.block_size),
            perl.str("sizef"), perl.float(t.sizef),
            perl.str("is_quantized"), perl.int(i64::from(t.is_quantized)),
            perl.str("requires_imatrix"), perl.int(i64::from(t.requires_imatrix)),
            perl.str("can_quantize"), perl.int(i64::from(t.can_quantize)),
            perl.str("can_dequantize"), perl.int(i64::from(t.can_dequantize)),
        ]))
    }

    fn _quantize(args) as "Lugh::Quant::quantize" {
        args.expect(3, 3, "type, data, n_per_row")?;
        let perl = args.perl();
        let t = type_arg(perl, args.get(0))?;
        let data = args.get(1);
        let values: Vec<f32> = if perl.ref_kind(data) == b'A' {
            perl.float_array_arg(data, "data")?
        } else {
            let bytes = perl.byte_string_arg(data, "data (an array reference of numbers, or packed f32)")?;
            if bytes.len() % 4 != 0 {
                return Err(Error::Argument(format!(
                    "packed data must be whole f32 values (pack 'f<*'), got {} bytes", bytes.len()
                )).into());
            }
            bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes"))).collect()
        };
        let n_per_row = if perl.is_defined(args.get(2)) { perl.int_arg(args.get(2), "n_per_row")? } else { values.len() as i64 };
        if values.is_empty() {
            return Err(Error::Argument("there are no values to quantize".into()).into());
        }
        if n_per_row <= 0 {
            return Err(Error::Argument(format!("n_per_row must be positive, got {n_per_row}")).into());
        }
        Ok(Ret::One(perl.bytes(&quant::quantize(&t, &values, n_per_row as usize)?)))
    }

    fn _dequantize(args) as "Lugh::Quant::dequantize" {
        args.expect(2, 2, "type, bytes")?;
        let perl = args.perl();
        let t = type_arg(perl, args.get(0))?;
        let bytes = perl.byte_string_arg(args.get(1), "bytes")?;
        let values = quant::dequantize(&t, &bytes)?;
        let packed: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Ok(Ret::One(perl.bytes(&packed)))
    }
}
