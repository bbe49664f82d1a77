// Reference ids for tests/tst_tokenizer.cpp.
//
//   node tokenizer_reference.mjs HARD_STRINGS.json OUT_DIR [NODE_DATA_DIR]
//
// Encodes every string of HARD_STRINGS.json (a JSON array), and all of them
// joined into one long text, without special tokens (special tokens written
// in the text are still matched) with Hugging Face tokenizers itself (the
// Rust library, through its Node bindings, npm `tokenizers`), and, as a
// second opinion, with transformers.js
// (@lenml/tokenizers) or gpt-3-encoder. The tokenizer.json files come from
// the @lenml/tokenizer-* packages; variants of them that exercise other
// pre-tokenizers, normalizers and added-token flags are written under OUT_DIR,
// and the small hand-written ones committed in tests/tokenizer_data are
// encoded too. Prints one JSON object on stdout:
//
//   { NAME: { folder, tokenizer_json_path, other, cases: [
//       { text, ids, decoded, decoded_skip_special, ids_other } ] } }
//
// `ids` and `decoded*` are what Hugging Face tokenizers returns; `ids_other`
// is what the second implementation returns (absent where there is none).
// NODE_DATA_DIR holds node_modules (default: ../data beside this script).
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const [hardStringsPath, outDir, dataArg] = process.argv.slice(2);
if (!hardStringsPath || !outDir) {
  console.error("usage: node tokenizer_reference.mjs HARD_STRINGS.json OUT_DIR [NODE_DATA_DIR]");
  process.exit(2);
}
const dataDir = path.resolve(dataArg ?? path.join(here, "..", "data"));
const committedDir = path.join(here, "..", "tokenizer_data");
const require = createRequire(path.join(dataDir, "package.json"));
const modules = path.join(dataDir, "node_modules");

const hf = require("tokenizers");
const { TokenizerLoader } = require("@lenml/tokenizers");
const gpt3 = require("gpt-3-encoder");

const hardStrings = JSON.parse(fs.readFileSync(hardStringsPath, "utf8"));
// Plus one long text (all of them joined, four times): long words, caches, Llama's one-word segments.
const texts = [...hardStrings, Array(4).fill(hardStrings.join(" ")).join("\n")];
const readJson = (p) => JSON.parse(fs.readFileSync(p, "utf8"));
const clone = (x) => JSON.parse(JSON.stringify(x));

function packageModels(pkg) {
  const dir = path.join(modules, "@lenml", pkg, "models");
  return { dir, json: readJson(path.join(dir, "tokenizer.json")), config: readJson(path.join(dir, "tokenizer_config.json")) };
}

function writeVariant(name, json, config) {
  const dir = path.join(outDir, name);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, "tokenizer.json"), JSON.stringify(json));
  if (config) fs.writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify(config));
  return dir;
}

// Added token entry with the id Hugging Face would give it: the model's id when
// the content is in the vocab, else the next free one.
function addToken(json, content, flags) {
  let id = json.model.vocab[content];
  if (id === undefined) {
    const ids = Object.values(json.model.vocab).concat(json.added_tokens.map((t) => t.id));
    id = Math.max(...ids) + 1;
  }
  json.added_tokens.push({ id, content, single_word: false, lstrip: false, rstrip: false,
    normalized: !flags.special, special: false, ...flags });
}

async function runHf(tokenizer, text) {
  const enc = await tokenizer.encode(text, null, { addSpecialTokens: false });
  const ids = Array.from(enc.getIds());
  return { ids, decoded: await tokenizer.decode(ids, false), decoded_skip_special: await tokenizer.decode(ids, true) };
}

// GPT-2 as OpenAI's encoder.py, which knows no special tokens: split them out
// first, as Hugging Face does for added tokens.
function gpt3Encode(text) {
  const ids = [];
  text.split("<|endoftext|>").forEach((part, i) => {
    if (i > 0) ids.push(50256);
    if (part.length) ids.push(...gpt3.encode(part));
  });
  return ids;
}

const entries = [];
const gpt2 = packageModels("tokenizer-gpt2");
const llama2 = packageModels("tokenizer-llama2");
const llama3 = packageModels("tokenizer-llama3");
const qwen3 = packageModels("tokenizer-qwen3");
// The newer families: Gemma 3 (byte-fallback BPE, 262k vocab), gpt-oss
// (o200k harmony), DeepSeek-V3 (byte-level BPE with its own split regex).
const gemma3 = packageModels("tokenizer-gemma3");
const gptoss = packageModels("tokenizer-gptoss");
const deepseekV3 = packageModels("tokenizer-deepseek_v3");

for (const [name, m] of [["gpt2", gpt2], ["llama2", llama2], ["llama3", llama3], ["qwen3", qwen3],
                         ["gemma3", gemma3], ["gptoss", gptoss], ["deepseek_v3", deepseekV3]]) {
  const js = TokenizerLoader.fromPreTrained({ tokenizerJSON: m.json, tokenizerConfig: m.config });
  entries.push({ name, dir: m.dir, other: "transformers.js",
    otherEncode: (t) => Array.from(js.encode(t, { add_special_tokens: false })) });
}

// GPT-2 as vocab.json + merges.txt (gpt-3-encoder ships OpenAI's encoder.json and vocab.bpe).
{
  const encoder = readJson(path.join(modules, "gpt-3-encoder", "encoder.json"));
  const same = Object.keys(encoder).length === Object.keys(gpt2.json.model.vocab).length &&
    Object.entries(encoder).every(([k, v]) => gpt2.json.model.vocab[k] === v);
  if (!same) throw new Error("gpt-3-encoder's encoder.json differs from GPT-2's tokenizer.json vocab");
  const dir = path.join(outDir, "gpt2-vocab-merges");
  fs.mkdirSync(dir, { recursive: true });
  fs.copyFileSync(path.join(modules, "gpt-3-encoder", "encoder.json"), path.join(dir, "vocab.json"));
  fs.copyFileSync(path.join(modules, "gpt-3-encoder", "vocab.bpe"), path.join(dir, "merges.txt"));
  entries.push({ name: "gpt2-vocab-merges", dir, hfJson: path.join(gpt2.dir, "tokenizer.json"),
    other: "gpt-3-encoder", otherEncode: gpt3Encode });
}

// ByteLevel with add_prefix_space (RoBERTa/OPT-style option).
{
  const j = clone(gpt2.json);
  j.pre_tokenizer.add_prefix_space = true;
  entries.push({ name: "gpt2-prefix-space", dir: writeVariant("gpt2-prefix-space", j, gpt2.config) });
}
// Normalizers, Digits, Split behaviours and added-token flags on GPT-2's vocab.
{
  const j = clone(gpt2.json);
  j.normalizer = { type: "Sequence", normalizers: [
    { type: "NFKC" },
    { type: "Replace", pattern: { Regex: " {3,}" }, content: "  " }] };
  j.pre_tokenizer = { type: "Sequence", pretokenizers: [
    { type: "Digits", individual_digits: true },
    { type: "Split", pattern: { String: "-" }, behavior: "Removed", invert: false },
    { type: "Split", pattern: { Regex: "\\s+" }, behavior: "MergedWithNext", invert: false },
    { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true }] };
  addToken(j, "<mask>", { special: true, lstrip: true, normalized: false });
  addToken(j, "[END]", { special: true, rstrip: true, normalized: false });
  addToken(j, "world", { special: false, single_word: true, normalized: true });
  addToken(j, "ﬁ", { special: false, normalized: true });
  entries.push({ name: "gpt2-kitchen-sink", dir: writeVariant("gpt2-kitchen-sink", j, gpt2.config) });
}
{
  const j = clone(gpt2.json);
  j.normalizer = { type: "Sequence", normalizers: [{ type: "Lowercase" }, { type: "Strip", strip_left: true, strip_right: false }] };
  j.pre_tokenizer = { type: "Sequence", pretokenizers: [
    { type: "Split", pattern: { Regex: "\\p{P}" }, behavior: "Contiguous", invert: false },
    { type: "Split", pattern: { Regex: "[a-z]+" }, behavior: "MergedWithPrevious", invert: true },
    { type: "Digits", individual_digits: false },
    { type: "Punctuation", behavior: "MergedWithNext" },
    { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: false }] };
  entries.push({ name: "gpt2-split-behaviours", dir: writeVariant("gpt2-split-behaviours", j, gpt2.config) });
}
{
  const j = clone(gpt2.json);
  j.pre_tokenizer = { type: "Sequence", pretokenizers: [
    { type: "WhitespaceSplit" },
    { type: "Split", pattern: { Regex: "\\w+" }, behavior: "Removed", invert: true },
    { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false }] };
  entries.push({ name: "gpt2-whitespace", dir: writeVariant("gpt2-whitespace", j, gpt2.config) });
}
// Metaspace pre-tokenizer instead of Llama 2's normalizer (how newer Llama /
// Mistral tokenizer.json files are converted): first, always, never.
for (const [scheme, split] of [["first", false], ["always", true], ["never", true]]) {
  const j = clone(llama2.json);
  j.normalizer = null;
  j.pre_tokenizer = { type: "Metaspace", replacement: "▁", prepend_scheme: scheme, split };
  if (scheme === "never") {
    j.pre_tokenizer = { type: "Sequence", pretokenizers: [{ type: "Punctuation", behavior: "Isolated" }, j.pre_tokenizer] };
  }
  if (scheme !== "first") {
    j.decoder = { type: "Sequence", decoders: [{ type: "ByteFallback" }, { type: "Metaspace", replacement: "▁", prepend_scheme: scheme, split }] };
  }
  const name = `llama2-metaspace-${scheme}`;
  entries.push({ name, dir: writeVariant(name, j, llama2.config) });
}
// Llama 3 without ignore_merges: whole words in the vocab are then built by merges.
{
  const j = clone(llama3.json);
  j.model.ignore_merges = false;
  entries.push({ name: "llama3-no-ignore-merges", dir: writeVariant("llama3-no-ignore-merges", j, null) });
}
// The small hand-written ones.
for (const name of fs.readdirSync(committedDir).sort()) {
  const p = path.join(committedDir, name, "tokenizer.json");
  if (fs.existsSync(p)) entries.push({ name, dir: path.join(committedDir, name) });
}

const out = {};
for (const e of entries) {
  const jsonPath = e.hfJson ?? path.join(e.dir, "tokenizer.json");
  const tok = hf.Tokenizer.fromFile(jsonPath);
  const cases = [];
  for (const text of texts) {
    const c = { text, ...(await runHf(tok, text)) };
    if (e.otherEncode) c.ids_other = e.otherEncode(text);
    cases.push(c);
  }
  out[e.name] = { folder: e.dir, tokenizer_json_path: jsonPath, other: e.other ?? null, cases };
}
process.stdout.write(JSON.stringify(out));
