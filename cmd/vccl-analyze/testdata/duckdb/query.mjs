// Runs one SQL query with DuckDB and prints its rows as a JSON array of
// objects (64-bit integers as decimal strings).
//
//   node query.mjs 'SELECT …'
import { DuckDBInstance } from '@duckdb/node-api';

const db = await DuckDBInstance.create(':memory:');
const conn = await db.connect();
const reader = await conn.runAndReadAll(process.argv[2]);
console.log(JSON.stringify(reader.getRowObjectsJson()));
