//! XS subs of Lugh::Train: the losses (the batching helpers are perl, in
//! Lugh/Train.pm).
use super::autograd::{new_variable, variable_arg};
use super::tensor::context_arg;
use crate::engine::autograd::{apply, cross_entropy, Op};
use crate::glue::Ret;
use crate::xs_subs;

xs_subs! { "Lugh::Train";
    fn _cross_entropy_loss(args) as "Lugh::Train->cross_entropy_loss" {
        args.expect(4, 4, "ctx, record, logits, targets")?;
        let perl = args.perl();
        let ctx = context_arg(perl, args.get(0))?;
        let logits = variable_arg(perl, args.get(2), "logits")?;
        let targets = perl.int_array_arg(args.get(3), "targets (an array reference of class ids)")?;
        let loss = cross_entropy(&ctx, &logits, &targets, perl.is_true(args.get(1)))?;
        Ok(Ret::One(new_variable(perl, loss)))
    }

    fn _mse_loss(args) as "Lugh::Train->mse_loss" {
        args.expect(4, 4, "ctx, record, predictions, targets")?;
        let perl = args.perl();
        let ctx = context_arg(perl, args.get(0))?;
        let predictions = variable_arg(perl, args.get(2), "predictions")?;
        let targets = variable_arg(perl, args.get(3), "targets")?;
        let loss = apply(&ctx, Op::Mse, &[predictions, targets], perl.is_true(args.get(1)))?;
        Ok(Ret::One(new_variable(perl, loss)))
    }
}
