// Runs a wasm32-wasip1 program under node's WASI with the shared datasets at /data:
// `node [V8 flags] run.mjs <program.wasm> <datasets dir> [args…]`. Imports the program does not
// use at run time (the filter's proxy-wasm hostcalls, linked into the library) return 0.
import { readFile } from 'node:fs/promises';
import { WASI } from 'node:wasi';

const [program, datasets, ...args] = process.argv.slice(2);
const wasi = new WASI({
  version: 'preview1',
  args: ['toolsift-v8-bench', '/data', ...args],
  preopens: { '/data': datasets },
  returnOnExit: true,
});
const module = await WebAssembly.compile(await readFile(program));
const imports = { wasi_snapshot_preview1: wasi.wasiImport };
for (const wanted of WebAssembly.Module.imports(module)) {
  if (wanted.kind === 'function') {
    imports[wanted.module] ??= {};
    imports[wanted.module][wanted.name] ??= () => 0;
  }
}
const instance = await WebAssembly.instantiate(module, imports);
// The library's reactor export `_initialize` is not the program's to call: only `_start` is
// given to WASI.
const { memory, _start } = instance.exports;
const status = wasi.start({ exports: { memory, _start } });
// Exiting at once: node 20 has crashed tearing down a WASI instance after a run with V8 flags.
process.reallyExit(status ?? 0);
