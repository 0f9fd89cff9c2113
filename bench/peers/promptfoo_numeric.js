// promptfoo's assertion for the GSM8K peer run of bench/bench_peers.py: the numeric match
// of numeric_match.py (the first number after the last "A:", else the last number; commas
// dropped; equal as numbers) between the output and the test's `target` var.
const NUMBER = /-?\d[\d,]*(?:\.\d+)?|-?\.\d+/g;

function answer(text) {
  const at = text.lastIndexOf('A:');
  if (at >= 0) {
    const re = new RegExp(NUMBER.source, 'g');
    re.lastIndex = at + 2;
    const found = re.exec(text);
    if (found) return parseFloat(found[0].replace(/,/g, ''));
  }
  const all = text.match(NUMBER);
  return all ? parseFloat(all[all.length - 1].replace(/,/g, '')) : null;
}

module.exports = (output, context) => {
  const got = answer(String(output));
  const want = answer(String(context.vars.target));
  return got !== null && want !== null && got === want;
};
