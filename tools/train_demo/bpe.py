"""Byte-level BPE in the GPT-2 style: training, encoding, decoding, and the
Hugging Face tokenizer.json it is saved as.

Written for the demo checkpoint; only the standard library is used.
"""
import collections
import json
import re

# GPT-2's pre-tokenizer regex, the one Hugging Face's ByteLevel pre-tokenizer
# uses with use_regex=true:
#   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
# Python's re has no \p{..}; [^\W\d_] is "letter" and \d "number", which is
# exact for ASCII (the whole KJV corpus) and close elsewhere.
PRETOKENIZE = re.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""
)


def bytes_to_unicode():
    """GPT-2's reversible map from the 256 byte values to printable characters."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


BYTE_ENCODER = bytes_to_unicode()
BYTE_DECODER = {v: k for k, v in BYTE_ENCODER.items()}


def pretokenize(text):
    """Split text as the ByteLevel pre-tokenizer does and map each piece's bytes."""
    return ["".join(BYTE_ENCODER[b] for b in m.encode("utf-8")) for m in PRETOKENIZE.findall(text)]


def train(texts, vocab_size, special_tokens, log=print):
    """Learn merges until the vocabulary (special tokens + 256 bytes + merges)
    reaches vocab_size. Returns (vocab dict token->id, merges list of pairs).

    Pair counts are updated incrementally, touching only the words that hold
    the pair being merged. Ties between equally frequent pairs go to the pair
    counted first (dict order is insertion order, and the sets iterated hold
    ints only, so the result does not depend on PYTHONHASHSEED).
    """
    word_freq = collections.Counter()
    for t in texts:
        word_freq.update(pretokenize(t))
    words = [list(w) for w in word_freq]
    freqs = [word_freq[w] for w in word_freq]

    pair_count = collections.Counter()
    pair_words = collections.defaultdict(set)
    for i, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pair_count[(a, b)] += freqs[i]
            pair_words[(a, b)].add(i)

    vocab = {}
    for tok in special_tokens:
        vocab[tok] = len(vocab)
    for b in range(256):
        vocab[BYTE_ENCODER[b]] = len(vocab)

    merges = []
    while len(vocab) < vocab_size and pair_count:
        best = max(pair_count.items(), key=lambda kv: kv[1])[0]
        if pair_count[best] < 2:
            break
        a, b = best
        new = a + b
        merges.append(best)
        vocab[new] = len(vocab)
        for i in list(pair_words[best]):
            w = words[i]
            f = freqs[i]
            for p in zip(w, w[1:]):
                pair_count[p] -= f
                if pair_count[p] <= 0:
                    del pair_count[p]
                pair_words[p].discard(i)
            out = []
            j = 0
            while j < len(w):
                if j + 1 < len(w) and w[j] == a and w[j + 1] == b:
                    out.append(new)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            words[i] = out
            for p in zip(out, out[1:]):
                pair_count[p] += f
                pair_words[p].add(i)
        pair_words.pop(best, None)
        if len(merges) % 500 == 0:
            log(f"  bpe: {len(merges)} merges, vocab {len(vocab)}")
    return vocab, merges


class Tokenizer:
    """Encodes as Hugging Face's BPE model: in each pre-token, repeatedly merge
    the adjacent pair with the lowest merge rank."""

    def __init__(self, vocab, merges, special_tokens):
        self.vocab = vocab
        self.inv = {i: t for t, i in vocab.items()}
        self.ranks = {tuple(m): r for r, m in enumerate(merges)}
        self.merges = [tuple(m) for m in merges]
        self.special_tokens = list(special_tokens)
        self.cache = {}

    def _bpe(self, piece):
        if piece in self.cache:
            return self.cache[piece]
        w = list(piece)
        while len(w) > 1:
            best, rank = None, None
            for j in range(len(w) - 1):
                r = self.ranks.get((w[j], w[j + 1]))
                if r is not None and (rank is None or r < rank):
                    best, rank = j, r
            if best is None:
                break
            w = w[:best] + [w[best] + w[best + 1]] + w[best + 2:]
        ids = [self.vocab[t] for t in w]
        self.cache[piece] = ids
        return ids

    def encode(self, text):
        """Ids of text, no special tokens added (special-token strings in the
        text are not recognised; the corpus has none)."""
        ids = []
        for piece in pretokenize(text):
            ids.extend(self._bpe(piece))
        return ids

    def decode(self, ids):
        out = bytearray()
        parts = []
        for i in ids:
            t = self.inv[i]
            if t in self.special_tokens:
                parts.append(out.decode("utf-8", errors="replace"))
                parts.append(t)
                out = bytearray()
            else:
                out.extend(BYTE_DECODER[c] for c in t)
        parts.append(out.decode("utf-8", errors="replace"))
        return "".join(parts)

    def to_hf_json(self, bos, eos):
        added = [
            {"id": self.vocab[t], "content": t, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for t in self.special_tokens
        ]
        bos_id = self.vocab[bos]
        return {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": added,
            "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
            # transformers' fast tokenizer puts BOS first through this template, as Llama 3's does
            "post_processor": {
                "type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}},
            },
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            "model": {
                "type": "BPE",
                "dropout": None,
                "unk_token": None,
                "continuing_subword_prefix": None,
                "end_of_word_suffix": None,
                "fuse_unk": False,
                "byte_fallback": False,
                "ignore_merges": False,
                "vocab": self.vocab,
                "merges": [list(m) for m in self.merges],
            },
        }

    @classmethod
    def from_hf_json(cls, path):
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
        m = j["model"]
        merges = [tuple(x.split(" ")) if isinstance(x, str) else tuple(x) for x in m["merges"]]
        specials = [t["content"] for t in j["added_tokens"]]
        return cls(m["vocab"], merges, specials)
