//! XS subs of Lugh::Optimizer (SGD and AdamW share them; the schedulers are
//! perl, in Lugh/Optimizer.pm).
use super::autograd::{new_variable, variable_arg};
use crate::engine::train::optimizer::{clip_grad_norm, clip_grad_value, Optimizer, Rule};
use crate::engine::Error;
use crate::glue::{new_object, object_arc, set, Args, Given, Opt, Ret, Sv};
use crate::xs_subs;
use std::sync::Arc;

pub const CLASS: &str = "Lugh::Optimizer";

fn this(args: &Args) -> Result<Arc<Optimizer>, Error> {
    object_arc::<Optimizer>(args.perl(), args.get(0), CLASS)
}

/// The autograd tensors from argument `first` on.
fn variables(args: &Args, first: usize) -> Result<Vec<Arc<crate::engine::train::autograd::Variable>>, Error> {
    let perl = args.perl();
    args.rest(first).into_iter().enumerate().map(|(i, sv)| variable_arg(perl, sv, &format!("tensor {i}"))).collect()
}

/// The options of an optimizer's new: the learning rate (lr, Lugh 0.12's
/// learning_rate; default 0.001), the tensors to train (params) and the
/// rule's own hyperparameters.
struct NewArgs<R> {
    lr: f64,
    params: Vec<Sv>,
    rule: R,
}

impl<R> NewArgs<R> {
    fn new(rule: R) -> Self {
        NewArgs { lr: 0.001, params: Vec::new(), rule }
    }
}

struct SgdArgs {
    momentum: f64,
    weight_decay: f64,
    nesterov: bool,
}

struct AdamwArgs {
    beta1: f64,
    beta2: f64,
    eps: f64,
    weight_decay: f64,
}

const fn lr_opt<R>() -> Opt<NewArgs<R>> {
    Opt::new("lr", |perl, sv, o: &mut NewArgs<R>| set(&mut o.lr, perl.number_arg(sv, "lr")))
        .with_aliases(&["learning_rate"])
}

const fn params_opt<R>() -> Opt<NewArgs<R>> {
    Opt::new("params", |perl, sv, o: &mut NewArgs<R>| {
        let list = perl
            .array_arg(sv, "params")
            .map_err(|_| Error::Argument("params must be an array reference of Lugh::Autograd::Tensor".into()));
        set(&mut o.params, list)
    })
}

const SGD_OPTIONS: &[Opt<NewArgs<SgdArgs>>] = &[
    lr_opt(),
    params_opt(),
    Opt::new("momentum", |perl, sv, o: &mut NewArgs<SgdArgs>| {
        set(&mut o.rule.momentum, perl.number_arg(sv, "momentum"))
    }),
    Opt::new("weight_decay", |perl, sv, o| set(&mut o.rule.weight_decay, perl.number_arg(sv, "weight_decay"))),
    Opt::new("nesterov", |perl, sv, o| set(&mut o.rule.nesterov, Ok(perl.is_true(sv)))),
];

const ADAMW_OPTIONS: &[Opt<NewArgs<AdamwArgs>>] = &[
    lr_opt(),
    params_opt(),
    Opt::new("beta1", |perl, sv, o: &mut NewArgs<AdamwArgs>| set(&mut o.rule.beta1, perl.number_arg(sv, "beta1"))),
    Opt::new("beta2", |perl, sv, o| set(&mut o.rule.beta2, perl.number_arg(sv, "beta2"))),
    Opt::new("eps", |perl, sv, o: &mut NewArgs<AdamwArgs>| set(&mut o.rule.eps, perl.number_arg(sv, "eps")))
        .with_aliases(&["epsilon"]),
    Opt::new("weight_decay", |perl, sv, o| set(&mut o.rule.weight_decay, perl.number_arg(sv, "weight_decay"))),
];

/// A new optimizer of `rule` for the class of args' first argument, with
/// `params` (autograd tensors) added in order.
fn new_optimizer(args: &Args, rule: Rule, lr: f64, params: Vec<Sv>) -> Result<Ret, Error> {
    let perl = args.perl();
    let class = perl.class_arg(args.get(0))?;
    let optimizer = Optimizer::new(rule, lr)?;
    for sv in params {
        optimizer.add_param(variable_arg(perl, sv, "the parameter")?)?;
    }
    Ok(Ret::One(new_object(perl, &class, Arc::new(optimizer))))
}

xs_subs! { "Lugh::Optimizer";
    // class, then name => value options (SGD_OPTIONS)
    fn _new_sgd(args) as "Lugh::Optimizer::SGD->new" {
        let mut o = NewArgs::new(SgdArgs { momentum: 0.0, weight_decay: 0.0, nesterov: false });
        Given::read_into(args.perl(), &args.rest(1), SGD_OPTIONS, &mut o)?;
        let SgdArgs { momentum, weight_decay, nesterov } = o.rule;
        Ok(new_optimizer(args, Rule::Sgd { momentum, weight_decay, nesterov }, o.lr, o.params)?)
    }

    // class, then name => value options (ADAMW_OPTIONS)
    fn _new_adamw(args) as "Lugh::Optimizer::AdamW->new" {
        let mut o = NewArgs::new(AdamwArgs { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 });
        Given::read_into(args.perl(), &args.rest(1), ADAMW_OPTIONS, &mut o)?;
        let AdamwArgs { beta1, beta2, eps, weight_decay } = o.rule;
        Ok(new_optimizer(args, Rule::AdamW { beta1, beta2, eps, weight_decay }, o.lr, o.params)?)
    }

    fn add_param(args) as "Lugh::Optimizer->add_param" {
        args.expect(2, 2, "self, tensor")?;
        let o = this(args)?;
        o.add_param(variable_arg(args.perl(), args.get(1), "the parameter")?)?;
        Ok(Ret::Empty)
    }

    fn params(args) as "Lugh::Optimizer->params" {
        args.expect(1, 1, "self")?;
        let perl = args.perl();
        Ok(Ret::List(this(args)?.params().into_iter().map(|v| new_variable(perl, v)).collect()))
    }

    fn get_lr(args) as "Lugh::Optimizer->get_lr" {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().float(this(args)?.lr())))
    }

    fn set_lr(args) as "Lugh::Optimizer->set_lr" {
        args.expect(2, 2, "self, lr")?;
        let o = this(args)?;
        o.set_lr(args.perl().number_arg(args.get(1), "lr")?)?;
        Ok(Ret::Empty)
    }

    fn get_step_count(args) as "Lugh::Optimizer->get_step_count" {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().uint(this(args)?.step_count())))
    }

    fn _hyperparameters(args) as "Lugh::Optimizer->hyperparameters" {
        args.expect(1, 1, "self")?;
        let perl = args.perl();
        let pairs: Vec<(&str, f64)> = match this(args)?.rule() {
            Rule::Sgd { momentum, weight_decay, nesterov } => {
                vec![("momentum", momentum), ("weight_decay", weight_decay), ("nesterov", f64::from(u8::from(nesterov)))]
            }
            Rule::AdamW { beta1, beta2, eps, weight_decay } => {
                vec![("beta1", beta1), ("beta2", beta2), ("eps", eps), ("weight_decay", weight_decay)]
            }
        };
        Ok(Ret::List(pairs.into_iter().flat_map(|(k, v)| [perl.str(k), perl.float(v)]).collect()))
    }

    fn step(args) as "Lugh::Optimizer->step" {
        args.expect(1, 1, "self")?;
        this(args)?.step()?;
        Ok(Ret::Empty)
    }

    fn zero_grad(args) as "Lugh::Optimizer->zero_grad" {
        args.expect(1, 1, "self")?;
        this(args)?.zero_grad();
        Ok(Ret::Empty)
    }

    fn _clip_grad_norm(args) as "Lugh::Optimizer->clip_grad_norm" {
        let perl = args.perl();
        let max = perl.number_arg(args.get(0), "max_norm")?;
        Ok(Ret::One(perl.float(clip_grad_norm(&variables(args, 1)?, max)?)))
    }

    fn _clip_grad_value(args) as "Lugh::Optimizer->clip_grad_value" {
        let perl = args.perl();
        let max = perl.number_arg(args.get(0), "max_value")?;
        clip_grad_value(&variables(args, 1)?, max)?;
        Ok(Ret::Empty)
    }
}
