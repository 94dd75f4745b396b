//! XS subs of Lugh::Train: the training forward and the losses (the
//! batching helpers are perl, in Lugh/Train.pm).
use super::autograd::{new_variable, variable_arg};
use super::lora::lora_arg;
use super::tensor::context_arg;
use crate::engine::forward::lora::AdapterUses;
use crate::engine::generate::inference::Inference;
use crate::engine::tensor::TensorContext;
use crate::engine::train::autograd::{apply, cross_entropy, Op, Variable};
use crate::engine::train::lora::TrainableAdapter;
use crate::engine::train::pass::{trainable_weights, TrainingPass};
use crate::engine::Error;
use crate::glue::{object_arc, option_names, set, Given, Opt, Perl, Ret, Sv};
use crate::xs_subs;
use std::collections::HashMap;
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

/// What Lugh::Train->forward is given besides the session.
struct ForwardArgs {
    n_vocab: usize,
    tokens: Option<Vec<i32>>,
    adapters: AdapterUses,
    /// The context the logits live in (read after the pass: a new one is
    /// sized to them).
    context: Option<Sv>,
    /// Whether the operations are recorded for backward (the grad mode).
    record: bool,
    train_lora: bool,
    train_full: bool,
}

/// The options of Lugh::Train->forward, in the order they are read.
const FORWARD_OPTIONS: &[Opt<ForwardArgs>] = &[
    Opt::new("tokens", |perl, sv, a: &mut ForwardArgs| {
        set(&mut a.tokens, perl.token_array_arg(sv, "tokens", a.n_vocab).map(Some))
    }),
    Opt::new("lora", |perl, sv, a| set(&mut a.adapters, lora_arg(perl, sv))),
    Opt::new("context", |_, sv, a| {
        a.context = Some(sv);
        Ok(())
    }),
    Opt::new("record", |perl, sv, a| {
        a.record = perl.is_true(sv);
        Ok(())
    }),
    Opt::new("train_lora", |perl, sv, a| {
        a.train_lora = perl.is_true(sv);
        Ok(())
    }),
    Opt::new("train_full", |perl, sv, a| {
        a.train_full = perl.is_true(sv);
        Ok(())
    }),
];

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
        let perl = args.perl();
        let inference = object_arc::<Inference>(perl, args.get(0), super::inference::CLASS).map_err(|_| {
            Error::Argument(format!("inference must be a Lugh::Inference object, got {}", perl.describe(args.get(0))))
        })?;
        let runner = &inference.runner;
        let mut call = ForwardArgs {
            n_vocab: runner.n_vocab(),
            tokens: None,
            adapters: Vec::new(),
            context: None,
            record: false,
            train_lora: true,
            train_full: false,
        };
        Given::read_into(perl, &args.rest(1), FORWARD_OPTIONS, &mut call)?;
        let tokens = call.tokens.ok_or_else(super::inference::missing_tokens)?;
        let (adapters, record, train_lora, train_full) = (call.adapters, call.record, call.train_lora, call.train_full);
        let mut params: Vec<Arc<Variable>> = Vec::new();
        if train_lora {
            for (adapter, _) in &adapters {
                for (_, a, b) in adapter.trainable().unwrap_or_default() {
                    params.push(a.clone());
                    params.push(b.clone());
                }
            }
        }
        let mut replace = HashMap::new();
        if train_full {
            for (name, w) in trainable_weights(runner.model(), None)? {
                replace.insert(name, w.value().raw());
                params.push(w);
            }
        }
        if params.is_empty() {
            return Err(Error::Argument(
                "Lugh::Train->forward: nothing to train: give train_full => 1, or lora => an adapter made by \
                 Lugh::LoRA->create"
                    .into(),
            )
            .into());
        }
        let raw: Vec<_> = params.iter().map(|p| p.value().raw()).collect();
        let pass = TrainingPass::for_session(runner, &tokens, &adapters, &raw, &replace)?;
        let ctx = context_or_new(perl, call.context.unwrap_or_else(|| perl.undef()), 4 * pass.logits().len() + 4096)?;
        let logits = Variable::from_pass(&ctx, pass, params, record)?;
        Ok(Ret::One(new_variable(perl, logits)))
    }

    fn _forward_options(args) {
        option_names(args, FORWARD_OPTIONS)
    }

    fn _register_weight_tensors(args) as "Lugh::Train->register_weight_tensors" {
        args.expect(2, 2, "logits, weights")?;
        let perl = args.perl();
        let logits = variable_arg(perl, args.get(0), "logits")?;
        let weights = perl
            .array_arg(args.get(1), "weights")?
            .into_iter()
            .enumerate()
            .map(|(i, w)| variable_arg(perl, w, &format!("weight {i}")))
            .collect::<Result<Vec<_>, _>>()?;
        logits.register(&weights)?;
        Ok(Ret::Empty)
    }
}
