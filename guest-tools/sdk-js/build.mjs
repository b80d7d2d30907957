// Build a toolcell tool written in JavaScript into a component:
//
//   node build.mjs tool.js tool.wasm [--wit WIT_DIR]
//
// `tool.js` exports `tool` (see toolcell.js); WIT_DIR is toolcell's `wit/` (default: `wit`
// beside this file, as `toolcell sdk javascript` writes it). Network features are left out: a tool
// needs none, and toolcell refuses components that import them.
import { componentize } from '@bytecodealliance/componentize-js';
import { writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const args = process.argv.slice(2);
const witAt = args.indexOf('--wit');
const wit = witAt >= 0 ? args.splice(witAt, 2)[1] : join(dirname(fileURLToPath(import.meta.url)), 'wit');
const [source, out] = args;
if (!source || !out) {
  console.error('usage: node build.mjs tool.js tool.wasm [--wit WIT_DIR]');
  process.exit(2);
}
const { component } = await componentize({
  sourcePath: resolve(source),
  witPath: resolve(wit),
  worldName: 'tool-component',
  disableFeatures: ['http', 'fetch-event'],
});
await writeFile(out, component);
console.error(`built ${out} (${(component.length / 1048576).toFixed(1)} MiB)`);
