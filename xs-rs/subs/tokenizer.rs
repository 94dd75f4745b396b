//! XS subs of Lugh::Tokenizer and Lugh::Tokenizer::Decoder. Option handling
//! lives in Lugh/Tokenizer.pm.
use crate::engine::model::tokenizer::utf8::{lossy, StreamDecoder};
use crate::engine::model::tokenizer::{EncodeOptions, PieceDecoder, Vocab};
use crate::engine::model::Model;
use crate::engine::Error;
use crate::glue::{
    accessor_names, new_object, object_arc, option_names, read_accessor, set, Accessor, Args, Given, Opt, Perl, Ret, Sv,
};
use crate::xs_subs;
use std::sync::{Arc, Mutex};

const CLASS: &str = "Lugh::Tokenizer";
const DECODER_CLASS: &str = "Lugh::Tokenizer::Decoder";

fn this(args: &Args) -> Result<Arc<Vocab>, Error> {
    object_arc::<Vocab>(args.perl(), args.get(0), CLASS)
}

/// The vocabulary's facts: one accessor method each.
const ACCESSORS: &[Accessor<Vocab>] = &[
    Accessor { name: "n_vocab", read: |v, perl| Ok(perl.int(v.n_vocab() as i64)) },
    Accessor { name: "bos_id", read: |v, perl| Ok(opt_id(perl, v.special_ids().bos)) },
    Accessor { name: "eos_id", read: |v, perl| Ok(opt_id(perl, v.special_ids().eos)) },
    Accessor { name: "eot_id", read: |v, perl| Ok(opt_id(perl, v.special_ids().eot)) },
    Accessor { name: "eom_id", read: |v, perl| Ok(opt_id(perl, v.special_ids().eom)) },
    Accessor { name: "pad_id", read: |v, perl| Ok(opt_id(perl, v.special_ids().pad)) },
    Accessor { name: "unk_id", read: |v, perl| Ok(opt_id(perl, v.special_ids().unk)) },
    Accessor { name: "sep_id", read: |v, perl| Ok(opt_id(perl, v.special_ids().sep)) },
    Accessor { name: "mask_id", read: |v, perl| Ok(opt_id(perl, v.special_ids().mask)) },
    Accessor { name: "add_bos", read: |v, perl| Ok(perl.bool(v.add_bos_default())) },
    Accessor { name: "add_eos", read: |v, perl| Ok(perl.bool(v.add_eos_default())) },
    Accessor { name: "add_space_prefix", read: |v, perl| Ok(perl.bool(v.adds_space_prefix())) },
    Accessor { name: "algorithm", read: |v, perl| Ok(perl.str(v.algorithm())) },
    Accessor { name: "model_name", read: |v, perl| Ok(perl.str(v.model_name())) },
    Accessor { name: "pre_tokenizer", read: |v, perl| Ok(v.pre_name().map_or(perl.undef(), |p| perl.str(p))) },
];

/// A token id argument, checked against the vocabulary.
fn id_arg(perl: Perl, vocab: &Vocab, sv: Sv) -> Result<i32, Error> {
    let id = perl.int_arg(sv, "token id")?;
    if id < 0 || id >= vocab.n_vocab() as i64 {
        return Err(Error::TokenOutOfRange { pos: None, id, n_vocab: vocab.n_vocab() });
    }
    Ok(id as i32)
}

/// Token ids from an array reference, each checked (the error names its position).
fn ids_arg(perl: Perl, vocab: &Vocab, sv: Sv) -> Result<Vec<i32>, Error> {
    let ids = perl.int_array_arg(sv, "token ids")?;
    ids.iter()
        .enumerate()
        .map(|(pos, &id)| {
            if id < 0 || id >= vocab.n_vocab() as i64 {
                Err(Error::TokenOutOfRange { pos: Some(pos), id, n_vocab: vocab.n_vocab() })
            } else {
                Ok(id as i32)
            }
        })
        .collect()
}

fn opt_id(perl: Perl, id: Option<i32>) -> Sv {
    id.map_or(perl.undef(), |id| perl.int(id as i64))
}

/// Text for perl: characters (malformed UTF-8 as U+FFFD), or the bytes.
fn text_sv(perl: Perl, bytes: &[u8], as_bytes: bool) -> Sv {
    if as_bytes {
        perl.bytes(bytes)
    } else {
        perl.str(&lossy(bytes))
    }
}

/// The state behind a Lugh::Tokenizer::Decoder.
struct Decoder {
    vocab: Arc<Vocab>,
    state: Mutex<(PieceDecoder, StreamDecoder)>,
}

fn decoder(args: &Args) -> Result<Arc<Decoder>, Error> {
    object_arc::<Decoder>(args.perl(), args.get(0), DECODER_CLASS)
}

/// The options of encode: add_bos (default: the model's, when add_special),
/// add_special (the model's BOS and EOS; default on), parse_special, bytes
/// (the text is bytes, not characters). Any true value turns one on.
struct EncodeArgs {
    add_bos: Option<bool>,
    add_special: bool,
    parse_special: bool,
    bytes: bool,
}

const ENCODE_OPTIONS: &[Opt<EncodeArgs>] = &[
    Opt::new("add_bos", |perl, sv, a: &mut EncodeArgs| set(&mut a.add_bos, Ok(Some(perl.is_true(sv))))),
    Opt::new("add_special", |perl, sv, a| set(&mut a.add_special, Ok(perl.is_true(sv)))),
    Opt::new("parse_special", |perl, sv, a| set(&mut a.parse_special, Ok(perl.is_true(sv)))),
    Opt::new("bytes", |perl, sv, a| set(&mut a.bytes, Ok(perl.is_true(sv)))),
];

/// The options of new: the model whose vocabulary it is.
const NEW_OPTIONS: &[Opt<Option<Arc<Model>>>] =
    &[Opt::new("model", |perl, sv, m| set(m, object_arc::<Model>(perl, sv, "Lugh::Model").map(Some)))];

/// The options of decode: special (render special tokens), bytes (return
/// bytes, not characters).
#[derive(Default)]
struct DecodeArgs {
    special: bool,
    bytes: bool,
}

const DECODE_OPTIONS: &[Opt<DecodeArgs>] = &[
    Opt::new("special", |perl, sv, a: &mut DecodeArgs| set(&mut a.special, Ok(perl.is_true(sv)))),
    Opt::new("bytes", |perl, sv, a| set(&mut a.bytes, Ok(perl.is_true(sv)))),
];

/// The one option of token_to_piece and decoder: special (render special
/// tokens' text).
const SPECIAL_OPTIONS: &[Opt<bool>] = &[Opt::new("special", |perl, sv, special| set(special, Ok(perl.is_true(sv))))];

xs_subs! { "Lugh::Tokenizer";
    // class, then name => value options: model
    fn _new(args) as "Lugh::Tokenizer->new" {
        let perl = args.perl();
        let class = perl.class_arg(args.get(0))?;
        let mut model = None;
        Given::read_into(perl, &args.rest(1), NEW_OPTIONS, &mut model)?;
        let model = model.ok_or_else(|| Error::Argument("missing model => $model (a Lugh::Model)".into()))?;
        let vocab = model.vocab()?;
        Ok(Ret::One(new_object(perl, &class, vocab)))
    }

    // self, text, then name => value options (ENCODE_OPTIONS)
    fn _encode(args) as "Lugh::Tokenizer->encode" {
        let vocab = this(args)?;
        let perl = args.perl();
        let mut given = EncodeArgs { add_bos: None, add_special: true, parse_special: false, bytes: false };
        Given::read_into(perl, &args.rest(2), ENCODE_OPTIONS, &mut given)?;
        let options = EncodeOptions {
            add_bos: given.add_bos.unwrap_or(given.add_special && vocab.add_bos_default()),
            add_eos: given.add_special && vocab.add_eos_default(),
            parse_special: given.parse_special,
        };
        if options.add_bos && vocab.bos_id().is_none() {
            return Err(Error::Argument("add_bos: this vocabulary has no BOS token".into()).into());
        }
        if options.add_eos && vocab.closing_id().is_none() {
            return Err(Error::Argument("add_special: this vocabulary has no EOS token to add".into()).into());
        }
        let text = if given.bytes {
            perl.byte_string_arg(args.get(1), "text")?
        } else {
            perl.utf8_text_arg(args.get(1), "text")?
        };
        let ids = vocab.encode_bytes(&text, options);
        Ok(Ret::List(ids.into_iter().map(|id| perl.int(id as i64)).collect()))
    }

    // self, ids, then name => value options (DECODE_OPTIONS)
    fn _decode(args) as "Lugh::Tokenizer->decode" {
        let vocab = this(args)?;
        let perl = args.perl();
        let mut given = DecodeArgs::default();
        Given::read_into(perl, &args.rest(2), DECODE_OPTIONS, &mut given)?;
        let ids = ids_arg(perl, &vocab, args.get(1))?;
        let bytes = vocab.decode(&ids, given.special)?;
        Ok(Ret::One(text_sv(perl, &bytes, given.bytes)))
    }

    fn _decode_options(args) {
        option_names(args, DECODE_OPTIONS)
    }

    // self, id, then name => value options (SPECIAL_OPTIONS)
    fn _token_to_piece(args) as "Lugh::Tokenizer->token_to_piece" {
        let vocab = this(args)?;
        let perl = args.perl();
        let mut special = false;
        Given::read_into(perl, &args.rest(2), SPECIAL_OPTIONS, &mut special)?;
        let id = id_arg(perl, &vocab, args.get(1))?;
        Ok(Ret::One(perl.bytes(vocab.piece(id, special)?)))
    }

    fn token_to_text(args) as "Lugh::Tokenizer->token_to_text" {
        args.expect(2, 2, "self, id")?;
        let vocab = this(args)?;
        let perl = args.perl();
        let id = id_arg(perl, &vocab, args.get(1))?;
        Ok(Ret::One(text_sv(perl, vocab.token_text(id)?, false)))
    }

    fn text_to_token(args) as "Lugh::Tokenizer->text_to_token" {
        args.expect(2, 2, "self, text")?;
        let vocab = this(args)?;
        let perl = args.perl();
        let text = perl.utf8_text_arg(args.get(1), "token text")?;
        Ok(Ret::One(opt_id(perl, vocab.text_to_token(&text))))
    }

    fn _type(args) as "Lugh::Tokenizer->type" {
        args.expect(2, 2, "self, id")?;
        let vocab = this(args)?;
        let perl = args.perl();
        let id = id_arg(perl, &vocab, args.get(1))?;
        Ok(Ret::One(perl.str(vocab.token_type(id)?.name())))
    }

    fn is_eog(args) as "Lugh::Tokenizer->is_eog" {
        args.expect(2, 2, "self, id")?;
        let vocab = this(args)?;
        let perl = args.perl();
        let id = perl.int_arg(args.get(1), "token id")?;
        Ok(Ret::One(perl.bool(i32::try_from(id).is_ok_and(|id| vocab.is_eog(id)))))
    }

    fn eog_ids(args) as "Lugh::Tokenizer->eog_ids" {
        args.expect(1, 1, "self")?;
        let vocab = this(args)?;
        let perl = args.perl();
        Ok(Ret::List(vocab.eog_ids().iter().map(|&id| perl.int(id as i64)).collect()))
    }

    fn _accessor_names(args) {
        accessor_names(args, ACCESSORS)
    }

    fn _accessor(args) {
        read_accessor(args, CLASS, ACCESSORS)
    }

    // self, then name => value options (SPECIAL_OPTIONS)
    fn _decoder(args) as "Lugh::Tokenizer->decoder" {
        let vocab = this(args)?;
        let perl = args.perl();
        let mut special = false;
        Given::read_into(perl, &args.rest(1), SPECIAL_OPTIONS, &mut special)?;
        let piece_decoder = vocab.piece_decoder(special);
        let state = Decoder { vocab, state: Mutex::new((piece_decoder, StreamDecoder::default())) };
        Ok(Ret::One(new_object(perl, DECODER_CLASS, Arc::new(state))))
    }
}

/// The XS subs of Lugh::Tokenizer::Decoder.
pub mod decoder_subs {
    use super::*;

    xs_subs! { "Lugh::Tokenizer::Decoder";
        fn add(args) as "Lugh::Tokenizer::Decoder->add" {
            if args.is_empty() {
                return Err(Error::Argument("Usage: $decoder->add(@ids)".into()).into());
            }
            let d = decoder(args)?;
            let perl = args.perl();
            let ids: Vec<i32> = (1..args.len())
                .map(|i| {
                    id_arg(perl, &d.vocab, args.get(i)).map_err(|e| match e {
                        Error::TokenOutOfRange { id, n_vocab, .. } => {
                            Error::TokenOutOfRange { pos: Some(i - 1), id, n_vocab }
                        }
                        other => other,
                    })
                })
                .collect::<Result<_, _>>()?;
            let mut text = String::new();
            let mut guard = d.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let (pieces, stream) = &mut *guard;
            for id in ids {
                stream.push(pieces.next(&d.vocab, id)?, &mut text);
            }
            drop(guard);
            Ok(Ret::One(perl.str(&text)))
        }

        fn flush(args) as "Lugh::Tokenizer::Decoder->flush" {
            args.expect(1, 1, "self")?;
            let d = decoder(args)?;
            let mut text = String::new();
            let mut guard = d.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            guard.1.finish(&mut text);
            let special = guard.0.special();
            guard.0 = d.vocab.piece_decoder(special);
            drop(guard);
            Ok(Ret::One(args.perl().str(&text)))
        }

        fn pending(args) as "Lugh::Tokenizer::Decoder->pending" {
            args.expect(1, 1, "self")?;
            let d = decoder(args)?;
            let held = d.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).1.pending().to_vec();
            Ok(Ret::One(args.perl().bytes(&held)))
        }

        fn reset(args) as "Lugh::Tokenizer::Decoder->reset" {
            args.expect(1, 1, "self")?;
            let d = decoder(args)?;
            let mut guard = d.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let special = guard.0.special();
            *guard = (d.vocab.piece_decoder(special), StreamDecoder::default());
            drop(guard);
            Ok(Ret::Empty)
        }
    }
}
