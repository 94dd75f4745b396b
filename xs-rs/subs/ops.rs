//! XS subs of Lugh::Ops: each makes one ggml op's result tensor in a context
//! (lazily: a Lugh::Graph computes it). Lugh/Ops.pm wraps them so that both
//! `Lugh::Ops::add($ctx, ...)` and `Lugh::Ops->add($ctx, ...)` work; the
//! subs shared by several ops take the op's name first and report errors
//! under it.
use super::tensor::{context_arg, new_tensor, tensor_arg};
use crate::engine::tensor::ops::{self as tensor_ops, Binary, RopeOptions, Unary};
use crate::engine::tensor::TensorHandle;
use crate::engine::Error;
use crate::glue::{as_method, set, Args, Given, Opt, Ret, XsError};
use crate::xs_subs;
use std::sync::Arc;

/// Runs the op named by the first argument, errors reported as Lugh::Ops::NAME.
fn named_op(args: &Args, f: impl FnOnce(&str) -> Result<Arc<TensorHandle>, Error>) -> Result<Ret, XsError> {
    let perl = args.perl();
    let op = perl.string_arg(args.get(0), "op")?;
    let t = as_method(&format!("Lugh::Ops::{op}"), || f(&op))?;
    Ok(Ret::One(new_tensor(perl, t)))
}

/// The options of rope() (n_dims is its fourth argument).
const ROPE_OPTIONS: &[Opt<RopeOptions>] = &[
    Opt::new("mode", |perl, sv, o: &mut RopeOptions| {
        o.neox = match perl.string_arg(sv, "mode")?.as_str() {
            "norm" => false,
            "neox" => true,
            other => return Err(Error::Argument(format!("mode must be 'norm' or 'neox', got '{other}'"))),
        };
        Ok(())
    }),
    Opt::new("freq_base", |perl, sv, o| set(&mut o.freq_base, perl.number_arg(sv, "freq_base"))),
    Opt::new("freq_scale", |perl, sv, o| set(&mut o.freq_scale, perl.number_arg(sv, "freq_scale"))),
];

xs_subs! { "Lugh::Ops";
    fn _binary(args) as "Lugh::Ops::binary" {
        args.expect(4, 4, "op, ctx, a, b")?;
        let perl = args.perl();
        named_op(args, |op| {
            let op = match op {
                "add" => Binary::Add,
                "sub" => Binary::Sub,
                "mul" => Binary::Mul,
                _ => Binary::Div,
            };
            let ctx = context_arg(perl, args.get(1))?;
            let a = tensor_arg(perl, args.get(2), "the first operand")?;
            let b = tensor_arg(perl, args.get(3), "the second operand")?;
            tensor_ops::binary(&ctx, op, &a, &b)
        })
    }

    fn _unary(args) as "Lugh::Ops::unary" {
        args.expect(3, 3, "op, ctx, a")?;
        let perl = args.perl();
        named_op(args, |op| {
            let ctx = context_arg(perl, args.get(1))?;
            let a = tensor_arg(perl, args.get(2), "the input")?;
            match op {
                "silu" => tensor_ops::unary(&ctx, Unary::Silu, &a),
                "gelu" => tensor_ops::unary(&ctx, Unary::Gelu, &a),
                "relu" => tensor_ops::unary(&ctx, Unary::Relu, &a),
                "tanh" => tensor_ops::unary(&ctx, Unary::Tanh, &a),
                "exp" => tensor_ops::unary(&ctx, Unary::Exp, &a),
                "sqr" => tensor_ops::unary(&ctx, Unary::Sqr, &a),
                "sqrt" => tensor_ops::unary(&ctx, Unary::Sqrt, &a),
                "soft_max" => tensor_ops::soft_max(&ctx, &a),
                "sum" => tensor_ops::sum(&ctx, &a),
                "mean" => tensor_ops::mean(&ctx, &a),
                "argmax" => tensor_ops::argmax(&ctx, &a),
                "transpose" => tensor_ops::transpose(&ctx, &a),
                _ => tensor_ops::cont(&ctx, &a),
            }
        })
    }

    fn _with_number(args) as "Lugh::Ops::with_number" {
        args.expect(4, 4, "op, ctx, a, number")?;
        let perl = args.perl();
        named_op(args, |op| {
            let ctx = context_arg(perl, args.get(1))?;
            let a = tensor_arg(perl, args.get(2), "the input")?;
            match op {
                "scale" => tensor_ops::scale(&ctx, &a, perl.number_arg(args.get(3), "the factor")?),
                "rms_norm" => tensor_ops::rms_norm(&ctx, &a, perl.number_arg(args.get(3), "eps")?),
                "norm" => tensor_ops::norm(&ctx, &a, perl.number_arg(args.get(3), "eps")?),
                _ => tensor_ops::diag_mask_inf(&ctx, &a, perl.int_arg(args.get(3), "n_past")?),
            }
        })
    }

    fn _with_extents(args) as "Lugh::Ops::with_extents" {
        if args.len() < 4 {
            return Err(Error::Argument("give the context, the tensor and the extents".into()).into());
        }
        let perl = args.perl();
        named_op(args, |op| {
            let ctx = context_arg(perl, args.get(1))?;
            let a = tensor_arg(perl, args.get(2), "the input")?;
            let numbers = args
                .rest(3)
                .into_iter()
                .enumerate()
                .map(|(i, sv)| perl.int_arg(sv, &format!("argument {}", i + 3)))
                .collect::<Result<Vec<_>, _>>()?;
            match op {
                "permute" => tensor_ops::permute(&ctx, &a, &numbers),
                "reshape" => tensor_ops::reshape(&ctx, &a, &numbers),
                _ => tensor_ops::view(&ctx, &a, numbers[0], &numbers[1..]),
            }
        })
    }

    fn mul_mat(args) as "Lugh::Ops::mul_mat" {
        args.expect(3, 3, "ctx, a, b")?;
        let perl = args.perl();
        let ctx = context_arg(perl, args.get(0))?;
        let a = tensor_arg(perl, args.get(1), "the first operand")?;
        let b = tensor_arg(perl, args.get(2), "the second operand")?;
        Ok(Ret::One(new_tensor(perl, tensor_ops::mul_mat(&ctx, &a, &b)?)))
    }

    fn get_rows(args) as "Lugh::Ops::get_rows" {
        args.expect(3, 3, "ctx, a, ids")?;
        let perl = args.perl();
        let ctx = context_arg(perl, args.get(0))?;
        let a = tensor_arg(perl, args.get(1), "the source")?;
        let ids = tensor_arg(perl, args.get(2), "ids")?;
        Ok(Ret::One(new_tensor(perl, tensor_ops::get_rows(&ctx, &a, &ids)?)))
    }

    fn _concat(args) as "Lugh::Ops::concat" {
        args.expect(4, 4, "ctx, a, b, dim")?;
        let perl = args.perl();
        let ctx = context_arg(perl, args.get(0))?;
        let a = tensor_arg(perl, args.get(1), "the first tensor")?;
        let b = tensor_arg(perl, args.get(2), "the second tensor")?;
        let dim = perl.int_arg(args.get(3), "dim")?;
        Ok(Ret::One(new_tensor(perl, tensor_ops::concat(&ctx, &a, &b, dim)?)))
    }

    fn _rope(args) as "Lugh::Ops::rope" {
        if args.len() < 4 {
            return Err(XsError::Message("Usage: Lugh::Ops::rope($ctx, $a, $positions, $n_dims, %options)".into()));
        }
        let perl = args.perl();
        let mut options = RopeOptions { n_dims: 0, neox: false, freq_base: 10000.0, freq_scale: 1.0 };
        Given::read_into(perl, &args.rest(4), ROPE_OPTIONS, &mut options)?;
        let ctx = context_arg(perl, args.get(0))?;
        let a = tensor_arg(perl, args.get(1), "the input")?;
        let pos = tensor_arg(perl, args.get(2), "the positions")?;
        options.n_dims = perl.int_arg(args.get(3), "n_dims")?;
        Ok(Ret::One(new_tensor(perl, tensor_ops::rope(&ctx, &a, &pos, options)?)))
    }
}
