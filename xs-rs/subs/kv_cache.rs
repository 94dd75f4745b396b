//! XS subs of Lugh::KVCache (made by Lugh::Inference->create_kv_cache).
use super::inference::{CACHE_CLASS, CLASS as INFERENCE_CLASS};
use crate::engine::generate::inference::{CacheHandle, CacheShape, Inference};
use crate::engine::Error;
use crate::glue::{
    accessor_names, names, new_object, object_arc, read_accessor, set, Accessor, Args, Given, Opt, Perl, Ret, Sv,
    XsError,
};
use crate::xs_subs;
use std::path::PathBuf;
use std::sync::Arc;

fn this(args: &Args) -> Result<Arc<CacheHandle>, Error> {
    object_arc::<CacheHandle>(args.perl(), args.get(0), CACHE_CLASS)
}

/// The cache's counts: one accessor method each.
const ACCESSORS: &[Accessor<CacheHandle>] = &[
    Accessor { name: "n_cached", read: |c, perl| c.with(|kv| Ok(perl.int(kv.n_cached() as i64))) },
    Accessor { name: "n_ctx", read: |c, perl| c.with(|kv| Ok(perl.int(kv.n_ctx() as i64))) },
    Accessor { name: "n_layer", read: |c, perl| c.with(|kv| Ok(perl.int(kv.n_layer() as i64))) },
];

/// A dimension of a standalone cache's shape.
fn dimension(perl: Perl, sv: Sv, what: &str) -> Result<usize, Error> {
    let v = perl.int_arg(sv, what)?;
    usize::try_from(v).map_err(|_| Error::Argument(format!("{what} must be a positive integer, got {v}")))
}

/// The options of Lugh::KVCache->new, all required, in [`CacheShape`] order.
const SHAPE_OPTIONS: &[Opt<[Option<usize>; 4]>] = &[
    Opt::new("n_layer", |perl, sv, s| set(&mut s[0], dimension(perl, sv, "n_layer").map(Some))),
    Opt::new("n_ctx", |perl, sv, s| set(&mut s[1], dimension(perl, sv, "n_ctx").map(Some))),
    Opt::new("n_head_kv", |perl, sv, s| set(&mut s[2], dimension(perl, sv, "n_head_kv").map(Some))),
    Opt::new("head_dim", |perl, sv, s| set(&mut s[3], dimension(perl, sv, "head_dim").map(Some))),
];

/// The file a cache is saved to or loaded from.
fn file_arg(perl: Perl, sv: Sv) -> Result<PathBuf, Error> {
    let path = perl.path_arg(sv, "path")?;
    if path.as_os_str().is_empty() {
        return Err(Error::Argument("the path is empty (give the file of the saved cache)".into()));
    }
    Ok(path)
}

/// The options of Lugh::KVCache->load.
const LOAD_OPTIONS: &[Opt<Option<Arc<Inference>>>] = &[Opt::new("inference", |perl, sv, target| {
    set(target, object_arc::<Inference>(perl, sv, INFERENCE_CLASS).map(Some))
})];

xs_subs! { "Lugh::KVCache";
    fn new(args) as "Lugh::KVCache->new" {
        let perl = args.perl();
        let class = perl.class_arg(args.get(0))?;
        let given = Given::read(perl, &args.rest(1), &names(SHAPE_OPTIONS).collect::<Vec<_>>())?;
        let mut shape = [None; 4];
        given.apply(perl, SHAPE_OPTIONS, &mut shape)?;
        let dim = |i: usize| {
            shape[i].ok_or_else(|| {
                Error::Argument(format!(
                    "missing {} (or make the cache with $inference->create_kv_cache)",
                    SHAPE_OPTIONS[i].name
                ))
            })
        };
        let shape = CacheShape { n_layer: dim(0)?, n_ctx: dim(1)?, n_head_kv: dim(2)?, head_dim: dim(3)? };
        Ok(Ret::One(new_object(perl, &class, Arc::new(CacheHandle::standalone(shape)?))))
    }

    fn save(args) as "Lugh::KVCache->save" {
        args.expect(2, 2, "self, path")?;
        let c = this(args)?;
        let path = file_arg(args.perl(), args.get(1))?;
        c.save(&path)?;
        Ok(Ret::One(args.perl().int(1)))
    }

    fn load(args) as "Lugh::KVCache->load" {
        let perl = args.perl();
        if args.len() < 2 {
            return Err(XsError::Message("Usage: Lugh::KVCache->load($path, inference => $inference)".into()));
        }
        let class = perl.class_arg(args.get(0))?;
        let path = file_arg(perl, args.get(1))?;
        let given = Given::read(perl, &args.rest(2), &names(LOAD_OPTIONS).collect::<Vec<_>>())?;
        let mut inference = None;
        given.apply(perl, LOAD_OPTIONS, &mut inference)?;
        let inference = inference.ok_or_else(|| {
            Error::Argument("missing inference => $inference (the Lugh::Inference to continue the cache in)".into())
        })?;
        Ok(Ret::One(new_object(perl, &class, Arc::new(inference.load_cache(&path)?))))
    }

    fn _accessor_names(args) {
        accessor_names(args, ACCESSORS)
    }

    fn _accessor(args) {
        read_accessor(args, CACHE_CLASS, ACCESSORS)
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
