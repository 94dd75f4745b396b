//! XS subs of Lugh::Logits (made by the forward family with `as_object`).
use crate::engine::generate::logits::Logits;
use crate::engine::Error;
use crate::glue::{new_object, object_arc, set, Args, Given, Opt, Perl, Ret, Sv};
use crate::xs_subs;
use std::sync::Arc;

pub const CLASS: &str = "Lugh::Logits";

fn this(args: &Args) -> Result<Arc<Logits>, Error> {
    object_arc::<Logits>(args.perl(), args.get(0), CLASS)
}

/// A temperature argument: undef is 1.
fn temperature(perl: Perl, sv: Sv) -> Result<f32, Error> {
    if perl.is_defined(sv) {
        perl.number_arg(sv, "temperature").map(|t| t as f32)
    } else {
        Ok(1.0)
    }
}

/// The option of softmax and log_softmax: the temperature (default 1).
const SOFTMAX_OPTIONS: &[Opt<f32>] = &[Opt::new("temperature", |perl, sv, t| set(t, temperature(perl, sv)))];

/// The (log-)softmax of the logits object of `args`, at its options'
/// temperature, as a new logits object.
fn softmax_of(args: &Args, log: bool) -> Result<Ret, Error> {
    let l = this(args)?;
    let perl = args.perl();
    let mut t = 1.0;
    Given::read_into(perl, &args.rest(1), SOFTMAX_OPTIONS, &mut t)?;
    let out = if log { l.log_softmax(t)? } else { l.softmax(t)? };
    Ok(Ret::One(new_object(perl, CLASS, Arc::new(out))))
}

xs_subs! { "Lugh::Logits";
    fn n_vocab(args) as "Lugh::Logits->n_vocab" {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().int(this(args)?.len() as i64)))
    }

    fn get(args) as "Lugh::Logits->get" {
        args.expect(2, 2, "self, id")?;
        let l = this(args)?;
        let perl = args.perl();
        let id = perl.int_arg(args.get(1), "token id")?;
        Ok(Ret::One(perl.float(f64::from(l.get(id)?))))
    }

    fn argmax(args) as "Lugh::Logits->argmax" {
        args.expect(1, 1, "self")?;
        let l = this(args)?;
        let perl = args.perl();
        Ok(Ret::One(l.argmax().map_or_else(|| perl.undef(), |id| perl.int(id as i64))))
    }

    fn top_k(args) as "Lugh::Logits->top_k" {
        args.expect(2, 2, "self, n")?;
        let l = this(args)?;
        let perl = args.perl();
        let n = perl.int_arg(args.get(1), "n")?;
        if n < 0 {
            return Err(Error::Argument(format!("n must be an integer >= 0, got {n}")).into());
        }
        let pairs = l.top_k(n as usize);
        Ok(Ret::List(pairs.iter().map(|&(id, v)| perl.array_ref(&[perl.int(id as i64), perl.float(f64::from(v))])).collect()))
    }

    // self, then name => value options (SOFTMAX_OPTIONS)
    fn softmax(args) as "Lugh::Logits->softmax" {
        Ok(softmax_of(args, false)?)
    }

    // self, then name => value options (SOFTMAX_OPTIONS)
    fn log_softmax(args) as "Lugh::Logits->log_softmax" {
        Ok(softmax_of(args, true)?)
    }

    fn to_list(args) as "Lugh::Logits->to_list" {
        args.expect(1, 1, "self")?;
        Ok(Ret::Floats(this(args)?.values().to_vec()))
    }

    fn packed(args) as "Lugh::Logits->packed" {
        args.expect(1, 1, "self")?;
        let l = this(args)?;
        let bytes: Vec<u8> = l.values().iter().flat_map(|v| v.to_le_bytes()).collect();
        Ok(Ret::One(args.perl().bytes(&bytes)))
    }
}
