//! XS subs of Lugh::Tensor: a tensor of a Lugh::Context.
use crate::engine::tensor::{TensorContext, TensorHandle, Values};
use crate::engine::Error;
use crate::glue::{new_object, object_arc, Args, Perl, Ret, Sv};
use crate::xs_subs;
use std::sync::Arc;

pub const CLASS: &str = "Lugh::Tensor";

/// The Lugh::Tensor object `sv` (`what` names it in the error).
pub fn tensor_arg(perl: Perl, sv: Sv, what: &str) -> Result<Arc<TensorHandle>, Error> {
    object_arc::<TensorHandle>(perl, sv, CLASS)
        .map_err(|_| Error::Argument(format!("{what} must be a {CLASS} object, got {}", perl.describe(sv))))
}

/// The Lugh::Context object `sv`.
pub fn context_arg(perl: Perl, sv: Sv) -> Result<Arc<TensorContext>, Error> {
    object_arc::<TensorContext>(perl, sv, super::context::CLASS).map_err(|_| {
        Error::Argument(format!("the context must be a {} object, got {}", super::context::CLASS, perl.describe(sv)))
    })
}

/// The context an optional argument names, or the tensor's own.
fn context_or_own(perl: Perl, sv: Sv, t: &TensorHandle) -> Result<Arc<TensorContext>, Error> {
    if perl.is_defined(sv) {
        context_arg(perl, sv)
    } else {
        Ok(t.context().clone())
    }
}

/// The extents given from argument `first` on, each an integer.
pub fn dims_from(args: &Args, first: usize) -> Result<Vec<i64>, Error> {
    let perl = args.perl();
    args.rest(first).into_iter().enumerate().map(|(i, sv)| perl.int_arg(sv, &format!("dimension {i}"))).collect()
}

/// The class and the context of a constructor's arguments (class, context,
/// type, ...): at least `min` of them, else the error `missing`.
pub fn constructor_args(args: &Args, min: usize, missing: &str) -> Result<(String, Arc<TensorContext>), Error> {
    if args.len() < min {
        return Err(Error::Argument(missing.into()));
    }
    let perl = args.perl();
    Ok((perl.class_arg(args.get(0))?, context_arg(perl, args.get(1))?))
}

pub fn new_tensor(perl: Perl, t: Arc<TensorHandle>) -> Sv {
    new_object(perl, CLASS, t)
}

fn this(args: &Args) -> Result<Arc<TensorHandle>, Error> {
    object_arc::<TensorHandle>(args.perl(), args.get(0), CLASS)
}

xs_subs! { "Lugh::Tensor";
    fn _new(args) as "Lugh::Tensor->new" {
        let (class, ctx) = constructor_args(args, 3, "give a context, a type and 1 to 4 dimensions")?;
        let perl = args.perl();
        let type_id = perl.int_arg(args.get(2), "type")?;
        let dims = dims_from(args, 3)?;
        let t = TensorHandle::new(&ctx, type_id, &dims)?;
        Ok(Ret::One(new_object(perl, &class, t)))
    }

    // Lugh 0.12's way to an autograd tensor's Lugh::Tensor: the "pointer" is
    // a token that resolves only while its owner lives.
    fn from_ptr(args) as "Lugh::Tensor->from_ptr" {
        args.expect(2, 2, "handle")?;
        let perl = args.perl();
        let class = perl.class_arg(args.get(0))?;
        let token = perl.int_arg(args.get(1), "handle")?;
        let t = crate::engine::train::autograd::Variable::tensor_for_handle(token)?;
        Ok(Ret::One(new_object(perl, &class, t)))
    }

    fn set_f32(args) as "Lugh::Tensor->set_f32" {
        let t = this(args)?;
        let perl = args.perl();
        let mut items = args.rest(1);
        if items.len() == 1 && perl.ref_kind(items[0]) == b'A' {
            items = perl.array_arg(items[0], "values")?;
        }
        let values = items
            .into_iter()
            .enumerate()
            .map(|(i, sv)| perl.number_arg(sv, &format!("value {i}")))
            .collect::<Result<Vec<_>, _>>()?;
        t.set_values(&values)?;
        Ok(Ret::Empty)
    }

    fn get_f32(args) as "Lugh::Tensor->get_f32" {
        args.expect(1, 1, "self")?;
        let perl = args.perl();
        Ok(match this(args)?.values()? {
            Values::F32(v) => Ret::Floats(v),
            Values::F64(v) => Ret::List(v.into_iter().map(|x| perl.float(x)).collect()),
            Values::Int(v) => Ret::List(v.into_iter().map(|x| perl.int(x)).collect()),
        })
    }

    fn get_bytes(args) as "Lugh::Tensor->get_bytes" {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().bytes(&this(args)?.bytes()?)))
    }

    fn set_bytes(args) as "Lugh::Tensor->set_bytes" {
        args.expect(2, 2, "self, bytes")?;
        let t = this(args)?;
        let bytes = args.perl().byte_string_arg(args.get(1), "bytes")?;
        t.set_bytes(&bytes)?;
        Ok(Ret::Empty)
    }

    fn nelements(args) as "Lugh::Tensor->nelements" {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().int(this(args)?.nelements())))
    }

    fn n_dims(args) as "Lugh::Tensor->n_dims" {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().int(this(args)?.shape().len() as i64)))
    }

    fn shape(args) as "Lugh::Tensor->shape" {
        args.expect(1, 1, "self")?;
        let perl = args.perl();
        Ok(Ret::List(this(args)?.shape().into_iter().map(|d| perl.int(d)).collect()))
    }

    fn ne(args) as "Lugh::Tensor->ne" {
        args.expect(1, 1, "self")?;
        let perl = args.perl();
        Ok(Ret::List(this(args)?.ne().into_iter().map(|d| perl.int(d)).collect()))
    }

    fn _type_id(args) as "Lugh::Tensor->type" {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().int(i64::from(this(args)?.type_info().id))))
    }

    fn type_name(args) as "Lugh::Tensor->type_name" {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().str(this(args)?.type_info().name)))
    }

    fn type_size(args) as "Lugh::Tensor->type_size" {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().uint(this(args)?.type_info().type_size)))
    }

    fn blck_size(args) as "Lugh::Tensor->blck_size" {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().uint(this(args)?.type_info().block_size)))
    }

    fn is_quantized(args) as "Lugh::Tensor->is_quantized" {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().bool(this(args)?.type_info().is_quantized)))
    }

    fn is_contiguous(args) as "Lugh::Tensor->is_contiguous" {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().bool(this(args)?.is_contiguous())))
    }

    fn has_data(args) as "Lugh::Tensor->has_data" {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().bool(this(args)?.has_data())))
    }

    fn nbytes(args) as "Lugh::Tensor->nbytes" {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().uint(this(args)?.nbytes() as u64)))
    }

    fn context(args) as "Lugh::Tensor->context" {
        args.expect(1, 1, "self")?;
        let perl = args.perl();
        Ok(Ret::One(new_object(perl, super::context::CLASS, this(args)?.context().clone())))
    }

    fn _quantize(args) as "Lugh::Tensor->quantize" {
        args.expect(3, 3, "self, ctx, type")?;
        let t = this(args)?;
        let perl = args.perl();
        let ctx = context_or_own(perl, args.get(1), &t)?;
        let type_id = perl.int_arg(args.get(2), "the destination type")?;
        Ok(Ret::One(new_tensor(perl, t.quantize(&ctx, type_id)?)))
    }

    fn _dequantize(args) as "Lugh::Tensor->dequantize" {
        args.expect(2, 2, "self, ctx")?;
        let t = this(args)?;
        let perl = args.perl();
        let ctx = context_or_own(perl, args.get(1), &t)?;
        Ok(Ret::One(new_tensor(perl, t.dequantize(&ctx)?)))
    }
}
