//! Named options: each method declares its options once, as a table of
//! [`Opt`] rows (name, other spellings, how a value is read into the
//! method's options struct). The XS sub reads the caller's name => value
//! pairs through its tables, and the .pm asks for the names (to pass them
//! on, or to list them), so adding an option is one row. Defaults are the
//! `Default` of the options struct, in the engine.
use super::{Args, Perl, Ret, Sv, XsResult};
use crate::engine::Error;

/// One option: its name, the other names it answers to, and how a (defined)
/// value given for it is checked and stored in `T`.
pub struct Opt<T> {
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    pub read: fn(Perl, Sv, &mut T) -> Result<(), Error>,
}

impl<T> Opt<T> {
    pub const fn new(name: &'static str, read: fn(Perl, Sv, &mut T) -> Result<(), Error>) -> Self {
        Opt { name, aliases: &[], read }
    }

    pub const fn with_aliases(mut self, aliases: &'static [&'static str]) -> Self {
        self.aliases = aliases;
        self
    }
}

/// Stores a value read for an option: `read` functions are one call, e.g.
/// `|perl, sv, o| set(&mut o.top_k, perl.int_arg(sv, "top_k"))`.
pub fn set<T>(slot: &mut T, value: Result<T, Error>) -> Result<(), Error> {
    *slot = value?;
    Ok(())
}

/// The names of a table's options, for a list of valid names.
pub fn names<T>(table: &[Opt<T>]) -> impl Iterator<Item = (&'static str, &'static [&'static str])> + '_ {
    table.iter().map(|opt| (opt.name, opt.aliases))
}

/// The XS sub `_option_names` of a method: its table's names, in the
/// table's order, for the .pm to check or list.
pub fn option_names<T>(args: &Args, table: &[Opt<T>]) -> XsResult {
    args.expect(0, 1, "")?;
    let perl = args.perl();
    Ok(Ret::List(table.iter().map(|opt| perl.str(opt.name)).collect()))
}

/// The name => value pairs a caller gave, checked against the valid names.
pub struct Given {
    /// (canonical name, value), in the order given; a later pair for the
    /// same name wins, as in a Perl hash.
    pairs: Vec<(&'static str, Sv)>,
}

impl Given {
    /// Reads `items`, name => value pairs as the caller wrote them.
    /// `valid` lists each option's name and aliases.
    pub fn read(perl: Perl, items: &[Sv], valid: &[(&'static str, &'static [&'static str])]) -> Result<Given, Error> {
        if items.len() % 2 != 0 {
            return Err(Error::Argument("options must be name => value pairs".into()));
        }
        let mut given: Vec<(&'static str, Sv, String)> = Vec::with_capacity(items.len() / 2);
        for pair in items.chunks(2) {
            let key = perl.string_arg(pair[0], "option name")?;
            let Some(&(name, aliases)) = valid.iter().find(|(n, a)| *n == key || a.contains(&key.as_str())) else {
                let mut known: Vec<&'static str> =
                    valid.iter().flat_map(|(n, a)| std::iter::once(*n).chain(a.iter().copied())).collect();
                known.sort_unstable();
                return Err(Error::UnknownOption { name: key, known });
            };
            if given.iter().any(|(n, _, spelled)| *n == name && *spelled != key) {
                let mut spellings: Vec<&str> = aliases.to_vec();
                spellings.sort_unstable();
                spellings.insert(0, name);
                return Err(Error::Argument(format!("give only one of {}", spellings.join(", "))));
            }
            given.retain(|(n, _, _)| *n != name);
            given.push((name, pair[1], key));
        }
        Ok(Given { pairs: given.into_iter().map(|(name, sv, _)| (name, sv)).collect() })
    }

    /// Reads `items` as values in the order of `names` (a method's
    /// positional form, as Lugh 0.12 took some options).
    pub fn positional(items: &[Sv], names: &[&'static str]) -> Result<Given, Error> {
        if items.len() > names.len() {
            return Err(Error::Argument(format!(
                "takes at most {} values after the logits ({}), got {}",
                names.len(),
                names.join(", "),
                items.len()
            )));
        }
        Ok(Given { pairs: names.iter().copied().zip(items.iter().copied()).collect() })
    }

    /// Reads `items` against `table` and stores each defined value in
    /// `target`: a method with one table of options.
    pub fn read_into<T>(perl: Perl, items: &[Sv], table: &[Opt<T>], target: &mut T) -> Result<Given, Error> {
        let given = Given::read(perl, items, &names(table).collect::<Vec<_>>())?;
        given.apply(perl, table, target)?;
        Ok(given)
    }

    /// The value given for `name`, if defined (undef = the default).
    pub fn get(&self, perl: Perl, name: &str) -> Option<Sv> {
        self.pairs.iter().find(|(n, _)| *n == name).map(|&(_, sv)| sv).filter(|&sv| perl.is_defined(sv))
    }

    /// Stores each defined value of `table`'s options in `target`.
    pub fn apply<T>(&self, perl: Perl, table: &[Opt<T>], target: &mut T) -> Result<(), Error> {
        for opt in table {
            if let Some(sv) = self.get(perl, opt.name) {
                (opt.read)(perl, sv, target)?;
            }
        }
        Ok(())
    }
}
