//! XS subs of Lugh::KVCache (made by Lugh::Inference->create_kv_cache).
use crate::engine::session::{CacheHandle, CacheShape};
use crate::engine::Error;
use crate::glue::{as_method, new_object, object_arc, Args, Ret};
use crate::xs_subs;
use std::sync::Arc;

fn this(args: &Args) -> Result<Arc<CacheHandle>, Error> {
    object_arc::<CacheHandle>(args.perl(), args.get(0), super::inference::CACHE_CLASS)
}

xs_subs! { "Lugh::KVCache";
    fn _new(args) as "Lugh::KVCache->new" {
        args.expect(5, 5, "class, n_layer, n_ctx, n_head_kv, head_dim")?;
        let perl = args.perl();
        let class = perl.class_arg(args.get(0))?;
        let dim = |i: usize, what: &str| -> Result<usize, Error> {
            let v = perl.int_arg(args.get(i), what)?;
            usize::try_from(v).map_err(|_| Error::Argument(format!("{what} must be a positive integer, got {v}")))
        };
        let shape = CacheShape {
            n_layer: dim(1, "n_layer")?,
            n_ctx: dim(2, "n_ctx")?,
            n_head_kv: dim(3, "n_head_kv")?,
            head_dim: dim(4, "head_dim")?,
        };
        Ok(Ret::One(new_object(perl, &class, Arc::new(CacheHandle::standalone(shape)?))))
    }

    fn _count(args) {
        args.expect(2, 2, "self, name")?;
        let perl = args.perl();
        let name = perl.string_arg(args.get(1), "name")?;
        as_method(&format!("{}->{name}", super::inference::CACHE_CLASS), || {
            let n = this(args)?.with(|kv| match name.as_str() {
                "n_cached" => Ok(kv.n_cached()),
                "n_ctx" => Ok(kv.n_ctx()),
                "n_layer" => Ok(kv.n_layer()),
                other => Err(Error::Argument(format!("unknown count '{other}'"))),
            })?;
            Ok(Ret::One(perl.int(n as i64)))
        })
    }

    fn tokens(args) {
        args.expect(1, 1, "self")?;
        let c = this(args)?;
        let perl = args.perl();
        let ids = c.with(|kv| Ok(kv.tokens().iter().map(|&id| perl.int(id as i64)).collect()))?;
        Ok(Ret::List(ids))
    }

    fn clear(args) {
        args.expect(1, 1, "self")?;
        this(args)?.with(|kv| {
            kv.clear();
            Ok(())
        })?;
        Ok(Ret::Empty)
    }

    fn resize(args) {
        args.expect(2, 2, "self, n")?;
        let c = this(args)?;
        let perl = args.perl();
        let n = perl.int_arg(args.get(1), "size")?;
        if n < 0 {
            return Err(Error::Argument(format!("the new size must be >= 0, got {n}")).into());
        }
        c.with(|kv| kv.resize(n as usize))?;
        Ok(Ret::Empty)
    }
}
