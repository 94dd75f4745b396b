//! XS subs of Lugh::Train: the training forward and the losses (the
//! batching helpers are perl, in Lugh/Train.pm).
use super::autograd::{new_variable, variable_arg};
use super::lora::lora_arg;
use super::tensor::context_arg;
use crate::engine::autograd::{apply, cross_entropy, Op, Variable};
use crate::engine::session::Inference;
use crate::engine::tensor::TensorContext;
use crate::engine::Error;
use crate::glue::{object_arc, Perl, Ret, Sv};
use crate::xs_subs;
use std::sync::Arc;

/// The context named by an optional argument, or a new one of `bytes` (so
/// a training loop that names none allocates nothing that outlives a step).
fn context_or_new(perl: Perl, sv: Sv, bytes: usize) -> Result<Arc<TensorContext>, Error> {
    if perl.is_defined(sv) {
        context_arg(perl, sv)
    } else {
        TensorContext::new((bytes + (64 << 10)) as u64)
    }
}

xs_subs! { "Lugh::Train";
    fn _cross_entropy_loss(args) as "Lugh::Train->cross_entropy_loss" {
        args.expect(4, 4, "ctx, record, logits, targets")?;
        let perl = args.perl();
        let logits = variable_arg(perl, args.get(2), "logits")?;
        let ctx = context_or_new(perl, args.get(0), 2 * logits.value().nbytes() + 4096)?;
        let targets = perl.int_array_arg(args.get(3), "targets (an array reference of class ids)")?;
        let loss = cross_entropy(&ctx, &logits, &targets, perl.is_true(args.get(1)))?;
        Ok(Ret::One(new_variable(perl, loss)))
    }

    fn _mse_loss(args) as "Lugh::Train->mse_loss" {
        args.expect(4, 4, "ctx, record, predictions, targets")?;
        let perl = args.perl();
        let predictions = variable_arg(perl, args.get(2), "predictions")?;
        let ctx = context_or_new(perl, args.get(0), 3 * predictions.value().nbytes() + 4096)?;
        let targets = variable_arg(perl, args.get(3), "targets")?;
        let loss = apply(&ctx, Op::Mse, &[predictions, targets], perl.is_true(args.get(1)))?;
        Ok(Ret::One(new_variable(perl, loss)))
    }

    fn _forward(args) as "Lugh::Train->forward" {
        args.expect(5, 5, "inference, tokens, lora, context, record")?;
        let perl = args.perl();
        let inference = object_arc::<Inference>(perl, args.get(0), super::inference::CLASS).map_err(|_| {
            Error::Argument(format!("inference must be a Lugh::Inference object, got {}", perl.describe(args.get(0))))
        })?;
        let runner = &inference.runner;
        let tokens = perl.token_array_arg(args.get(1), "tokens", runner.n_vocab())?;
        let adapters = if perl.is_defined(args.get(2)) { lora_arg(perl, args.get(2))? } else { Vec::new() };
        let record = perl.is_true(args.get(4));
        // the trainable tensors: those of each trainable adapter
        let mut params: Vec<Arc<Variable>> = Vec::new();
        for (adapter, _) in &adapters {
            let Some(pairs) = adapter.trainable() else { continue };
            for (_, a, b) in pairs {
                params.push(a.clone());
                params.push(b.clone());
            }
        }
        if params.is_empty() {
            return Err(Error::Argument(
                "Lugh::Train->forward: nothing to train: give lora => an adapter made by Lugh::LoRA->create".into(),
            )
            .into());
        }
        let raw: Vec<_> = params.iter().map(|p| p.value().raw()).collect();
        let pass = runner.training_pass(&tokens, &adapters, &raw)?;
        let ctx = context_or_new(perl, args.get(3), 4 * pass.logits().len() + 4096)?;
        let logits = Variable::from_pass(&ctx, pass, params, record)?;
        Ok(Ret::One(new_variable(perl, logits)))
    }
}
