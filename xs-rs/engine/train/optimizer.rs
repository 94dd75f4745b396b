//! Lugh::Optimizer: SGD (momentum, Nesterov, weight decay) and AdamW over
//! autograd parameters, each step a ggml graph built once per parameter
//! (AdamW is ggml-opt's own op), so a step allocates nothing.
use crate::engine::tensor::graph::TensorGraph;
use crate::engine::tensor::ops::{self as tensor_ops, Binary};
use crate::engine::tensor::{TensorContext, TensorHandle};
use crate::engine::train::autograd::Variable;
use crate::engine::Error;
use std::sync::{Arc, Mutex, MutexGuard};

const F32: i64 = 0;

/// The update rule and its fixed hyperparameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rule {
    /// g += wd·p; v = momentum·v + g; p -= lr·(Nesterov ? g + momentum·v : v)
    Sgd { momentum: f64, weight_decay: f64, nesterov: bool },
    /// Decoupled weight decay, then Adam with bias correction.
    AdamW { beta1: f64, beta2: f64, eps: f64, weight_decay: f64 },
}

/// A parameter and, once it has stepped, its step graph and state.
struct Slot {
    param: Arc<Variable>,
    program: Option<Program>,
}

/// One parameter's step: its inputs (gradient, hyperparameters) and the
/// graph that updates the parameter and the state tensors in place.
struct Program {
    grad: Arc<TensorHandle>,
    /// SGD: [lr], [momentum], [weight decay]; AdamW: the 7 of ggml-opt.
    hyper: Vec<Arc<TensorHandle>>,
    graph: TensorGraph,
}

pub struct Optimizer {
    rule: Rule,
    state: Mutex<State>,
}

struct State {
    lr: f64,
    step_count: u64,
    slots: Vec<Slot>,
}

impl Optimizer {
    pub fn new(rule: Rule, lr: f64) -> Result<Optimizer, Error> {
        check_lr(lr)?;
        let finite = |what: &str, v: f64, lo: f64, hi: f64| {
            if v.is_finite() && (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(Error::Argument(format!("{what} must be between {lo} and {hi}, got {v}")))
            }
        };
        match rule {
            Rule::Sgd { momentum, weight_decay, .. } => {
                finite("momentum", momentum, 0.0, 1.0)?;
                finite("weight_decay", weight_decay, 0.0, 1e6)?;
            }
            Rule::AdamW { beta1, beta2, eps, weight_decay } => {
                finite("beta1", beta1, 0.0, 0.999_999)?;
                finite("beta2", beta2, 0.0, 0.999_999_999)?;
                finite("eps", eps, 0.0, 1.0)?;
                finite("weight_decay", weight_decay, 0.0, 1e6)?;
            }
        }
        Ok(Optimizer { rule, state: Mutex::new(State { lr, step_count: 0, slots: Vec::new() }) })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn rule(&self) -> Rule {
        self.rule
    }

    /// Adds a parameter: an f32 leaf that requires a gradient.
    pub fn add_param(&self, param: Arc<Variable>) -> Result<(), Error> {
        if !param.is_leaf() || !param.requires_grad() {
            return Err(Error::Argument("a parameter must be a leaf tensor made with requires_grad => 1".into()));
        }
        let mut state = self.state();
        if !state.slots.iter().any(|s| Arc::ptr_eq(&s.param, &param)) {
            state.slots.push(Slot { param, program: None });
        }
        Ok(())
    }

    pub fn params(&self) -> Vec<Arc<Variable>> {
        self.state().slots.iter().map(|s| s.param.clone()).collect()
    }

    pub fn lr(&self) -> f64 {
        self.state().lr
    }

    pub fn set_lr(&self, lr: f64) -> Result<(), Error> {
        check_lr(lr)?;
        self.state().lr = lr;
        Ok(())
    }

    pub fn step_count(&self) -> u64 {
        self.state().step_count
    }

    pub fn zero_grad(&self) {
        for s in &self.state().slots {
            s.param.zero_grad();
        }
    }

    /// Updates every parameter that has a gradient.
    pub fn step(&self) -> Result<(), Error> {
        let mut state = self.state();
        let t = state.step_count + 1;
        let lr = state.lr;
        for slot in &mut state.slots {
            let Some(grad) = slot.param.grad().filter(|_| slot.param.requires_grad()) else {
                continue;
            };
            if slot.program.is_none() {
                slot.program = Some(build(self.rule, slot.param.value())?);
            }
            let program = slot.program.as_ref().expect("built above");
            let bytes: Vec<u8> = grad.iter().flat_map(|g| g.to_le_bytes()).collect();
            program.grad.set_bytes(&bytes)?;
            let hyper: Vec<Vec<f64>> = match self.rule {
                Rule::Sgd { momentum, weight_decay, .. } => vec![vec![lr], vec![momentum], vec![weight_decay]],
                Rule::AdamW { beta1, beta2, eps, weight_decay } => vec![vec![
                    lr,
                    beta1,
                    beta2,
                    eps,
                    weight_decay,
                    1.0 / (1.0 - beta1.powi(t as i32)),
                    1.0 / (1.0 - beta2.powi(t as i32)),
                ]],
            };
            for (tensor, values) in program.hyper.iter().zip(&hyper) {
                tensor.set_values(values)?;
            }
            program.graph.compute(1, "cpu")?;
        }
        state.step_count = t;
        Ok(())
    }
}

fn check_lr(lr: f64) -> Result<(), Error> {
    if lr.is_finite() && lr >= 0.0 {
        Ok(())
    } else {
        Err(Error::Argument(format!("the learning rate must be a number >= 0, got {lr}")))
    }
}

/// The step graph of one parameter, in a context of its own.
fn build(rule: Rule, p: &Arc<TensorHandle>) -> Result<Program, Error> {
    let shape = p.shape();
    let ctx = TensorContext::new((12 * p.nbytes() + 64 * 1024) as u64)?;
    let zeros = |ctx: &Arc<TensorContext>| TensorHandle::new(ctx, F32, &shape);
    let grad = zeros(&ctx)?;
    let graph = TensorGraph::new();
    let hyper = match rule {
        Rule::Sgd { weight_decay, nesterov, .. } => {
            let scalars: Vec<Arc<TensorHandle>> =
                (0..3).map(|_| TensorHandle::new(&ctx, F32, &[1])).collect::<Result<_, _>>()?;
            let (lr, momentum, decay) = (&scalars[0], &scalars[1], &scalars[2]);
            let velocity = zeros(&ctx)?;
            let g = if weight_decay > 0.0 {
                let decayed = tensor_ops::binary(&ctx, Binary::Mul, p, decay)?;
                tensor_ops::binary(&ctx, Binary::Add, &grad, &decayed)?
            } else {
                grad.clone()
            };
            let kept = tensor_ops::binary(&ctx, Binary::Mul, &velocity, momentum)?;
            let v_new = tensor_ops::binary(&ctx, Binary::Add, &kept, &g)?;
            let update = if nesterov {
                let ahead = tensor_ops::binary(&ctx, Binary::Mul, &v_new, momentum)?;
                tensor_ops::binary(&ctx, Binary::Add, &g, &ahead)?
            } else {
                v_new.clone()
            };
            let delta = tensor_ops::binary(&ctx, Binary::Mul, &update, lr)?;
            let p_new = tensor_ops::binary(&ctx, Binary::Sub, p, &delta)?;
            graph.build_forward(tensor_ops::copy_into(&ctx, &v_new, &velocity)?);
            graph.build_forward(tensor_ops::copy_into(&ctx, &p_new, p)?);
            scalars
        }
        Rule::AdamW { .. } => {
            let hyper = TensorHandle::new(&ctx, F32, &[7])?;
            let (m, v) = (zeros(&ctx)?, zeros(&ctx)?);
            graph.build_forward(tensor_ops::adamw_step(&ctx, p, &grad, &m, &v, &hyper)?);
            vec![hyper]
        }
    };
    Ok(Program { grad, hyper, graph })
}

/// Scales every gradient by max_norm / (norm + 1e-6) when their joint L2
/// norm is above max_norm; returns the norm before clipping.
pub fn clip_grad_norm(params: &[Arc<Variable>], max_norm: f64) -> Result<f64, Error> {
    if !(max_norm.is_finite() && max_norm > 0.0) {
        return Err(Error::Argument(format!("max_norm must be positive, got {max_norm}")));
    }
    let grads: Vec<(Arc<Variable>, Vec<f32>)> =
        params.iter().filter_map(|p| p.grad().map(|g| (p.clone(), g))).collect();
    let norm = grads.iter().flat_map(|(_, g)| g.iter()).map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
    if norm > max_norm {
        let factor = (max_norm / (norm + 1e-6)) as f32;
        for (p, g) in grads {
            p.set_grad(g.into_iter().map(|x| x * factor).collect());
        }
    }
    Ok(norm)
}

/// Clamps every gradient element to [-max_value, max_value].
pub fn clip_grad_value(params: &[Arc<Variable>], max_value: f64) -> Result<(), Error> {
    if !(max_value.is_finite() && max_value > 0.0) {
        return Err(Error::Argument(format!("max_value must be positive, got {max_value}")));
    }
    let limit = max_value as f32;
    for p in params {
        if let Some(g) = p.grad() {
            p.set_grad(g.into_iter().map(|x| x.clamp(-limit, limit)).collect());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(ctx: &Arc<TensorContext>, values: &[f64], grad: &[f32]) -> Arc<Variable> {
        let v = Variable::leaf(ctx, F32, &[values.len() as i64], true).unwrap();
        v.value().set_values(values).unwrap();
        v.set_grad(grad.to_vec());
        v
    }

    fn values(v: &Variable) -> Vec<f64> {
        v.data().unwrap()
    }

    #[test]
    fn sgd_follows_its_formula() {
        let ctx = TensorContext::new(1 << 20).unwrap();
        for nesterov in [false, true] {
            let p = param(&ctx, &[1.0, -2.0], &[0.5, 0.25]);
            let opt = Optimizer::new(Rule::Sgd { momentum: 0.9, weight_decay: 0.1, nesterov }, 0.1).unwrap();
            opt.add_param(p.clone()).unwrap();
            let (mut w, mut v) = ([1.0f32, -2.0], [0f32; 2]);
            for _ in 0..3 {
                opt.step().unwrap();
                for i in 0..2 {
                    let g = [0.5f32, 0.25][i] + 0.1 * w[i];
                    v[i] = 0.9 * v[i] + g;
                    let upd = if nesterov { g + 0.9 * v[i] } else { v[i] };
                    w[i] -= 0.1 * upd;
                }
            }
            let got = values(&p);
            for i in 0..2 {
                assert!((got[i] - f64::from(w[i])).abs() < 1e-6, "nesterov {nesterov}: {got:?} vs {w:?}");
            }
        }
    }

    #[test]
    fn adamw_follows_its_formula() {
        let ctx = TensorContext::new(1 << 20).unwrap();
        let p = param(&ctx, &[1.0, -2.0, 0.5], &[0.5, -0.25, 0.0]);
        let opt =
            Optimizer::new(Rule::AdamW { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 }, 0.01).unwrap();
        opt.add_param(p.clone()).unwrap();
        let (mut w, mut m, mut v) = ([1.0f64, -2.0, 0.5], [0f64; 3], [0f64; 3]);
        for t in 1..=4 {
            opt.step().unwrap();
            for i in 0..3 {
                let g = [0.5, -0.25, 0.0][i];
                m[i] = 0.9 * m[i] + 0.1 * g;
                v[i] = 0.999 * v[i] + 0.001 * g * g;
                let (mh, vh) = (m[i] / (1.0 - 0.9f64.powi(t)), v[i] / (1.0 - 0.999f64.powi(t)));
                w[i] = w[i] * (1.0 - 0.01 * 0.01) - 0.01 * mh / (vh.sqrt() + 1e-8);
            }
        }
        let got = values(&p);
        for i in 0..3 {
            assert!((got[i] - w[i]).abs() < 1e-5, "{got:?} vs {w:?}");
        }
        assert_eq!(opt.step_count(), 4);
    }

    #[test]
    fn clipping() {
        let ctx = TensorContext::new(1 << 20).unwrap();
        let a = param(&ctx, &[0.0, 0.0], &[3.0, 4.0]);
        let norm = clip_grad_norm(std::slice::from_ref(&a), 1.0).unwrap();
        assert!((norm - 5.0).abs() < 1e-9);
        let g = a.grad().unwrap();
        assert!((f64::from(g[0]) - 0.6).abs() < 1e-5 && (f64::from(g[1]) - 0.8).abs() < 1e-5);
        clip_grad_value(std::slice::from_ref(&a), 0.7).unwrap();
        let g = a.grad().unwrap();
        assert!((g[0] - 0.6).abs() < 1e-6 && g[1] == 0.7, "{g:?}");
        assert!(clip_grad_norm(&[a], 0.0).is_err());
    }
}
