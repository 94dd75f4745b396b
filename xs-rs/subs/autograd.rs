//! XS subs of Lugh::Autograd::Tensor and Lugh::Autograd::Ops (the grad
//! mode and the `no_grad { }` blocks live in Lugh/Autograd.pm).
use super::tensor::{constructor_args, context_arg, dims_from, new_tensor};
use crate::engine::ggml::quant;
use crate::engine::train::autograd::{apply, Op, Variable};
use crate::engine::Error;
use crate::glue::{as_method, new_object, object_arc, Args, Perl, Ret, Sv};
use crate::xs_subs;
use std::sync::Arc;

pub const CLASS: &str = "Lugh::Autograd::Tensor";

/// The autograd tensor `sv` (`what` names it in the error).
pub fn variable_arg(perl: Perl, sv: Sv, what: &str) -> Result<Arc<Variable>, Error> {
    object_arc::<Variable>(perl, sv, CLASS)
        .map_err(|_| Error::Argument(format!("{what} must be an {CLASS} object, got {}", perl.describe(sv))))
}

pub fn new_variable(perl: Perl, v: Arc<Variable>) -> Sv {
    new_object(perl, CLASS, v)
}

fn this(args: &Args) -> Result<Arc<Variable>, Error> {
    object_arc::<Variable>(args.perl(), args.get(0), CLASS)
}

xs_subs! { "Lugh::Autograd::Tensor";
    fn _new(args) as "Lugh::Autograd::Tensor->new" {
        let (class, ctx) = constructor_args(args, 4, "give a context, a type and the dimensions")?;
        let perl = args.perl();
        let type_name = perl.string_arg(args.get(2), "type")?;
        let type_id = match type_name.to_ascii_lowercase().as_str() {
            name @ ("f32" | "f16" | "i32") => quant::from_name(name).map(i64::from).expect("ggml has these types"),
            _ => return Err(Error::Argument(format!("Unsupported tensor type: {type_name} (use f32, f16, or i32)")).into()),
        };
        let requires_grad = perl.is_true(args.get(3));
        let dims = dims_from(args, 4)?;
        let dims = if dims.is_empty() { vec![1] } else { dims };
        let v = Variable::leaf(&ctx, type_id, &dims, requires_grad)?;
        Ok(Ret::One(new_object(perl, &class, v)))
    }

    fn requires_grad(args) as "Lugh::Autograd::Tensor->requires_grad" {
        args.expect(1, 2, "self, [flag]")?;
        let v = this(args)?;
        let perl = args.perl();
        if args.len() == 2 {
            v.set_requires_grad(perl.is_true(args.get(1)))?;
        }
        Ok(Ret::One(perl.bool(v.requires_grad())))
    }

    fn grad(args) as "Lugh::Autograd::Tensor->grad" {
        args.expect(1, 1, "self")?;
        let perl = args.perl();
        Ok(Ret::One(match this(args)?.grad() {
            Some(g) => perl.float_array_ref(&g),
            None => perl.undef(),
        }))
    }

    fn zero_grad(args) as "Lugh::Autograd::Tensor->zero_grad" {
        args.expect(1, 1, "self")?;
        this(args)?.zero_grad();
        Ok(Ret::Empty)
    }

    fn set_data(args) as "Lugh::Autograd::Tensor->set_data" {
        let v = this(args)?;
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
        v.value().set_values(&values)?;
        Ok(Ret::Empty)
    }

    fn get_data(args) as "Lugh::Autograd::Tensor->get_data" {
        args.expect(1, 1, "self")?;
        let perl = args.perl();
        Ok(Ret::List(this(args)?.data()?.into_iter().map(|x| perl.float(x)).collect()))
    }

    fn nelements(args) as "Lugh::Autograd::Tensor->nelements" {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().int(this(args)?.value().nelements())))
    }

    fn shape(args) as "Lugh::Autograd::Tensor->shape" {
        args.expect(1, 1, "self")?;
        let perl = args.perl();
        Ok(Ret::List(this(args)?.value().shape().into_iter().map(|d| perl.int(d)).collect()))
    }

    fn is_leaf(args) as "Lugh::Autograd::Tensor->is_leaf" {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().bool(this(args)?.is_leaf())))
    }

    fn id(args) as "Lugh::Autograd::Tensor->id" {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().uint(this(args)?.id())))
    }

    fn _raw_tensor_ptr(args) as "Lugh::Autograd::Tensor->_raw_tensor_ptr" {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().uint(this(args)?.raw_handle())))
    }

    fn tensor(args) as "Lugh::Autograd::Tensor->tensor" {
        args.expect(1, 1, "self")?;
        let perl = args.perl();
        Ok(Ret::One(new_tensor(perl, this(args)?.value().clone())))
    }

    fn backward(args) as "Lugh::Autograd::Tensor->backward" {
        let v = this(args)?;
        let perl = args.perl();
        let mut items = args.rest(1);
        if items.len() == 1 && perl.ref_kind(items[0]) == b'A' {
            items = perl.array_arg(items[0], "gradient")?;
        }
        let seed = items
            .into_iter()
            .enumerate()
            .map(|(i, sv)| perl.number_arg(sv, &format!("gradient value {i}")))
            .collect::<Result<Vec<_>, _>>()?;
        v.backward(if seed.is_empty() { None } else { Some(&seed) })?;
        Ok(Ret::Empty)
    }
}

pub mod ops {
    use super::*;

    xs_subs! { "Lugh::Autograd::Ops";
        fn _apply(args) as "Lugh::Autograd::Ops::apply" {
            if args.len() < 4 || args.len() > 5 {
                return Err(Error::Argument("Usage: Lugh::Autograd::Ops->OP($ctx, $a, [$b])".into()).into());
            }
            let perl = args.perl();
            let name = perl.string_arg(args.get(0), "op")?;
            let v = as_method(&format!("Lugh::Autograd::Ops->{name}"), || {
                let ctx = context_arg(perl, args.get(1))?;
                let record = perl.is_true(args.get(2));
                let a = variable_arg(perl, args.get(3), "the first argument")?;
                let second = || variable_arg(perl, args.get(4), "the second argument");
                let number = |what: &str| perl.number_arg(args.get(4), what);
                let (op, inputs) = match name.as_str() {
                    "add" => (Op::Add, vec![a, second()?]),
                    "sub" => (Op::Sub, vec![a, second()?]),
                    "mul" => (Op::Mul, vec![a, second()?]),
                    "div" => (Op::Div, vec![a, second()?]),
                    "matmul" => (Op::Matmul, vec![a, second()?]),
                    "sum" => (Op::Sum, vec![a]),
                    "mean" => (Op::Mean, vec![a]),
                    "relu" => (Op::Relu, vec![a]),
                    "gelu" => (Op::Gelu, vec![a]),
                    "silu" => (Op::Silu, vec![a]),
                    "softmax" => (Op::Softmax, vec![a]),
                    "scale" => (Op::Scale(number("the factor")?), vec![a]),
                    "rms_norm" => {
                        let eps = if perl.is_defined(args.get(4)) { number("eps")? } else { 1e-5 };
                        (Op::RmsNorm(eps), vec![a])
                    }
                    other => return Err(Error::Argument(format!("unknown op '{other}'"))),
                };
                apply(&ctx, op, &inputs, record)
            })?;
            Ok(Ret::One(new_variable(perl, v)))
        }
    }
}
