//! The tokenizer's lookup tables: std's HashMap with its randomly keyed
//! SipHash. Their keys come from the model file (token texts, merge pairs)
//! and from the text being tokenized, so a fixed unkeyed hash (FxHash, used
//! here before) could be flooded: strings chosen to collide make every
//! insert and lookup a scan, turning a vocabulary's load quadratic.
//! Measured on bench/tokenize: vocabulary load and tokenization speed within
//! the noise of FxHash (see the commit that made the change).
use std::collections::HashMap;

pub type Map<K, V> = HashMap<K, V>;

pub fn new_map<K, V>(capacity: usize) -> Map<K, V> {
    Map::with_capacity(capacity)
}
