//! The tokenizer loader (vocabulary, merges, special ids) and a round trip.
#![no_main]
use libfuzzer_sys::fuzz_target;
mod common;

fuzz_target!(|data: &[u8]| {
    let model = match common::open_model(data) {
        Ok(m) => m,
        Err(e) => return common::check_error(&e),
    };
    let vocab = match model.vocab() {
        Ok(v) => v,
        Err(e) => return common::check_error(&e),
    };
    let ids = vocab.encode("Hello world, the cat sat <|im_start|> \u{e9}\u{4e16} 123", true, true);
    for &id in &ids {
        assert!(id >= 0 && (id as usize) < vocab.n_vocab(), "encode gave id {id} of {}", vocab.n_vocab());
    }
    vocab.decode(&ids, true).expect("decoding ids that encode produced");
});
