// Reads VCCL-Go Arrow traces (IPC file or stream format) with the Arrow JS
// implementation and prints, per file, a JSON line: row and batch counts,
// the fields with their types, the schema metadata, the sum of every
// integer column (as a decimal string: 64-bit columns are BigInts), and
// the first value of every other column as Arrow JS gives it.
//
//   node read.mjs FILE...
import { readFileSync } from 'node:fs';
import { DataType, tableFromIPC } from 'apache-arrow';

for (const path of process.argv.slice(2)) {
  const table = tableFromIPC(readFileSync(path));
  const sums = {};
  const first = {};
  for (const field of table.schema.fields) {
    if (!DataType.isInt(field.type)) {
      const v = table.numRows > 0 ? table.getChild(field.name).get(0) : null;
      first[field.name] = typeof v === 'bigint' ? v.toString() : v;
      continue;
    }
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
    first,
  }));
}
