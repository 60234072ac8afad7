// Reads VCCL-Go Arrow traces (IPC file or stream format) with the Arrow JS
// implementation and prints, per file, a JSON line: row and batch counts,
// the fields with their types, the schema metadata, and the sum of every
// column (as a decimal string: 64-bit columns are BigInts).
//
//   node read.mjs FILE...
import { readFileSync } from 'node:fs';
import { tableFromIPC } from 'apache-arrow';

for (const path of process.argv.slice(2)) {
  const table = tableFromIPC(readFileSync(path));
  const sums = {};
  for (const field of table.schema.fields) {
    let sum = 0n;
    for (const v of table.getChild(field.name)) {
      sum += BigInt(v);
    }
    sums[field.name] = sum.toString();
  }
  console.log(JSON.stringify({
    path,
    rows: table.numRows,
    batches: table.batches.length,
    fields: table.schema.fields.map((f) => ({ name: f.name, type: String(f.type) })),
    metadata: Object.fromEntries(table.schema.metadata),
    sums,
  }));
}
