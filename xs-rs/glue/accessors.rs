//! Read-only accessor methods declared as data: a package lists its
//! accessors once, as a table of [`Accessor`] rows, and Lugh.pm makes one
//! method per row (`Lugh::_install_accessors`), so a new accessor is one row.
use super::{as_method, object_arc, Args, Perl, Ret, Sv, XsResult};
use crate::engine::Error;

/// `$object->NAME`: reads one value of the object.
pub struct Accessor<T> {
    pub name: &'static str,
    pub read: fn(&T, Perl) -> Result<Sv, Error>,
}

/// The XS sub `_accessor_names`: the names, for Lugh.pm to make methods of.
pub fn accessor_names<T>(args: &Args, table: &[Accessor<T>]) -> XsResult {
    args.expect(0, 1, "")?;
    let perl = args.perl();
    Ok(Ret::List(table.iter().map(|a| perl.str(a.name)).collect()))
}

/// The XS sub `_accessor(self, name)` behind every accessor method of `class`.
pub fn read_accessor<T: Send + Sync + 'static>(args: &Args, class: &str, table: &[Accessor<T>]) -> XsResult {
    args.expect(2, 2, "self, name")?;
    let perl = args.perl();
    let name = perl.string_arg(args.get(1), "accessor name")?;
    as_method(&format!("{class}->{name}"), || {
        let row =
            table.iter().find(|a| a.name == name).ok_or_else(|| Error::Argument(format!("no accessor '{name}'")))?;
        let object = object_arc::<T>(perl, args.get(0), class)?;
        (row.read)(&object, perl).map(Ret::One)
    })
}
