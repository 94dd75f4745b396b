//! XS subs of Lugh::Optimizer (SGD and AdamW share them; the schedulers are
//! perl, in Lugh/Optimizer.pm).
use super::autograd::{new_variable, variable_arg};
use crate::engine::train::optimizer::{clip_grad_norm, clip_grad_value, Optimizer, Rule};
use crate::engine::Error;
use crate::glue::{new_object, object_arc, Args, Ret};
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

xs_subs! { "Lugh::Optimizer";
    fn _new_sgd(args) as "Lugh::Optimizer::SGD->new" {
        args.expect(5, 5, "class, lr, momentum, weight_decay, nesterov")?;
        let perl = args.perl();
        let class = perl.class_arg(args.get(0))?;
        let rule = Rule::Sgd {
            momentum: perl.number_arg(args.get(2), "momentum")?,
            weight_decay: perl.number_arg(args.get(3), "weight_decay")?,
            nesterov: perl.is_true(args.get(4)),
        };
        let lr = perl.number_arg(args.get(1), "lr")?;
        Ok(Ret::One(new_object(perl, &class, Arc::new(Optimizer::new(rule, lr)?))))
    }

    fn _new_adamw(args) as "Lugh::Optimizer::AdamW->new" {
        args.expect(6, 6, "class, lr, beta1, beta2, eps, weight_decay")?;
        let perl = args.perl();
        let class = perl.class_arg(args.get(0))?;
        let rule = Rule::AdamW {
            beta1: perl.number_arg(args.get(2), "beta1")?,
            beta2: perl.number_arg(args.get(3), "beta2")?,
            eps: perl.number_arg(args.get(4), "eps")?,
            weight_decay: perl.number_arg(args.get(5), "weight_decay")?,
        };
        let lr = perl.number_arg(args.get(1), "lr")?;
        Ok(Ret::One(new_object(perl, &class, Arc::new(Optimizer::new(rule, lr)?))))
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
