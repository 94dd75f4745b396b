//! XS subs of Lugh::KVCache (made by Lugh::Inference->create_kv_cache).
use crate::engine::session::CacheHandle;
use crate::engine::Error;
use crate::glue::{object_arc, Args, Ret};
use crate::xs_subs;
use std::sync::Arc;

fn this(args: &Args) -> Result<Arc<CacheHandle>, Error> {
    object_arc::<CacheHandle>(args.perl(), args.get(0), super::inference::CACHE_CLASS)
}

xs_subs! { "Lugh::KVCache";
    fn _count(args) {
        args.expect(2, 2, c"self, name");
        let c = this(args)?;
        let perl = args.perl();
        let name = perl.string_arg(args.get(1), "name")?;
        let n = c.with(|kv| match name.as_str() {
            "n_cached" => Ok(kv.n_cached()),
            "n_ctx" => Ok(kv.n_ctx()),
            "n_layer" => Ok(kv.n_layer()),
            other => Err(Error::Argument(format!("unknown count '{other}'"))),
        })?;
        Ok(Ret::One(perl.int(n as i64)))
    }

    fn tokens(args) {
        args.expect(1, 1, c"self");
        let c = this(args)?;
        let perl = args.perl();
        let ids = c.with(|kv| Ok(kv.tokens().iter().map(|&id| perl.int(id as i64)).collect()))?;
        Ok(Ret::List(ids))
    }

    fn clear(args) {
        args.expect(1, 1, c"self");
        this(args)?.with(|kv| {
            kv.clear();
            Ok(())
        })?;
        Ok(Ret::Empty)
    }

    fn resize(args) {
        args.expect(2, 2, c"self, n");
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
