// Smoke test of the built JavaScript plugin components, run in Node.js.
//
//   node scripts/js/smoke.mjs [--policy FILE.wasm] [--agent FILE.wasm]
//
// Defaults: target/plugins/policy-rules-js.wasm and
// target/plugins/agent-scripted-js.wasm. Each component is transpiled with jco
// (installed with componentize-js by `npm ci --prefix scripts/js`), given stub
// keel:plugin/log and keel:plugin/model imports, and called through its real
// canonical ABI: results, variants and errors cross the component boundary as
// the Rust host will see them. The conformance tests in host/tests/ are the
// real check; this only catches a component that does not build, load or
// answer. Prints "N passed, N failed" and exits non-zero on a failure.

import { mkdtemp, readFile, rm, writeFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { deepStrictEqual } from 'node:assert/strict';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '../..');

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? resolve(args[i + 1]) : dflt;
};
const policyPath = opt('--policy', join(root, 'target/plugins/policy-rules-js.wasm'));
const agentPath = opt('--agent', join(root, 'target/plugins/agent-scripted-js.wasm'));

let transpile;
try {
  ({ transpile } = await import('@bytecodealliance/jco'));
} catch {
  console.error('error: jco is not installed; run the setup first: npm ci --prefix scripts/js');
  process.exit(1);
}

const STUBS = `
export const logged = [];
export function log(level, message) { logged.push([level, message]); }
export function complete(_request) {
  throw { payload: { tag: 'permanent', val: 'no model in the smoke test' } };
}
`;

async function load(wasmPath, name) {
  const dir = await mkdtemp(join(tmpdir(), `keel-js-smoke-${name}-`));
  const { files } = await transpile(await readFile(wasmPath), {
    name,
    map: {
      'keel:plugin/log@0.1.0': './keel-stubs.js',
      'keel:plugin/model@0.1.0': './keel-stubs.js',
    },
    quiet: true,
  });
  for (const [file, bytes] of Object.entries(files)) {
    await mkdir(dirname(join(dir, file)), { recursive: true });
    await writeFile(join(dir, file), bytes);
  }
  await writeFile(join(dir, 'keel-stubs.js'), STUBS);
  await writeFile(join(dir, 'package.json'), '{"type":"module"}');
  const mod = await import(pathToFileURL(join(dir, `${name}.js`)).href);
  return { mod, cleanup: () => rm(dir, { recursive: true, force: true }) };
}

// jco's host side throws a ComponentError whose payload is the err value.
function call(fn, ...a) {
  try {
    return { ok: fn(...a) };
  } catch (e) {
    if (e && Object.prototype.hasOwnProperty.call(e, 'payload')) return { err: e.payload };
    throw e; // a trap
  }
}

let passed = 0;
let failed = 0;
function check(label, actual, expected) {
  try {
    deepStrictEqual(actual, expected);
    passed++;
    console.log(`ok - ${label}`);
  } catch (e) {
    failed++;
    console.log(`not ok - ${label}\n${e.message}`);
  }
}

const run = { id: 'r1', goal: 'g', status: 'running', stepCount: 1, modelCalls: 0, tokens: 0n };
const view = (reset, steps = [], approvals = []) => ({ reset, run, steps, approvals });
const step = (index, decided, version = 1) => ({
  index,
  version,
  state: decided ? 'done' : 'started',
  decision: decided ? { tag: 'call', val: { tool: 'echo', arguments: '{}' } } : undefined,
  verdict: undefined,
  observation: undefined,
});

async function smokePolicy() {
  const { mod, cleanup } = await load(policyPath, 'policy');
  const config = JSON.stringify({
    rules: [
      { tool: 'fs_read', action: 'allow' },
      { tool: 'fs_*', args: { path: 'secrets/*' }, action: 'deny', reason: 'secrets are off limits' },
      { effect: ['local-mutation', 'remote-mutation'], action: 'require-approval', reason: 'writes need a human' },
      { effect: 'destructive', action: 'abort' },
    ],
  });
  check('policy: evaluate before init is an error', call(mod.evaluate, { tool: 'x', arguments: '{}' }, 'read-only', view(true)), {
    err: 'evaluate called before a successful init',
  });
  check('policy: init with a bad key', call(mod.init, '{"rule":[]}'), { err: 'config: unknown key "rule"' });
  check('policy: init with bad JSON', 'err' in call(mod.init, '{'), true);
  check('policy: init', call(mod.init, config), { ok: 'call-only' });
  const ev = (tool, a, effect) => call(mod.evaluate, { tool, arguments: JSON.stringify(a) }, effect, view(true));
  check('policy: allow', ev('fs_read', { path: 'secrets/x' }, 'read-only'), { ok: { tag: 'allow' } });
  check('policy: deny', ev('fs_write', { path: 'secrets/x' }, 'local-mutation'), {
    ok: { tag: 'deny', val: 'secrets are off limits' },
  });
  check('policy: require-approval', ev('fs_write', { path: 'a' }, 'local-mutation'), {
    ok: { tag: 'require-approval', val: { reason: 'writes need a human', presentation: '{"rule":2,"tool":"fs_write"}' } },
  });
  check('policy: abort', ev('rm', {}, 'destructive'), { ok: { tag: 'abort', val: 'matched rule 3' } });
  check('policy: default deny', ev('other', {}, 'read-only'), { ok: { tag: 'deny', val: 'no rule matched' } });
  check('policy: unicode', call(mod.init, '{"rules":[{"tool":"?","action":"allow"}]}'), { ok: 'call-only' });
  check('policy: ? is one scalar value', ev('\u{1F600}', {}, 'read-only'), { ok: { tag: 'allow' } });
  await cleanup();
}

async function smokeAgent() {
  const { mod, cleanup } = await load(agentPath, 'agent');
  const tools = [{ name: 'echo', description: '', parameters: '{}', effect: 'read-only' }];
  check('agent: decide before init is an error', call(mod.decide, view(true)), {
    err: 'decide called before a successful init',
  });
  check('agent: init with a bad key', call(mod.init, '{"scrip":[]}', tools), { err: 'config: unknown key "scrip"' });
  check('agent: init with a bad entry', call(mod.init, '{"script":[{}]}', tools), {
    err: 'config.script[0]: expected an object with exactly one of call, complete, fail',
  });
  const config = '{"script":[{"call":{"tool":"echo","arguments":{"b":1, "a":[12345678901234567890]}}},{"complete":{"ok":true}}]}';
  // 509 arrays inside the 3 levels of {"script":[{...}]}: json.js's limit of 512.
  const deep = '['.repeat(509) + ']'.repeat(509);
  check('agent: deep nesting parses inside the engine', call(mod.init, `{"script":[{"complete":${deep}}]}`, tools), { ok: undefined });
  check('agent: deep nesting is written back', call(mod.decide, view(true)), { ok: { tag: 'complete', val: deep } });
  check('agent: too deep is an error, not a trap', call(mod.init, `{"script":[{"complete":${'{"a":'.repeat(100000)}`, tools).err.startsWith('config: invalid JSON: nested too deeply'), true);
  check('agent: init', call(mod.init, config, tools), { ok: undefined });
  check('agent: first decision', call(mod.decide, view(true)), {
    ok: { tag: 'call', val: { tool: 'echo', arguments: '{"b":1,"a":[12345678901234567890]}' } },
  });
  check('agent: second decision after a delta', call(mod.decide, view(false, [step(0, true)])), {
    ok: { tag: 'complete', val: '{"ok":true}' },
  });
  check('agent: an undecided step does not count', call(mod.decide, view(false, [step(1, false)])), {
    ok: { tag: 'complete', val: '{"ok":true}' },
  });
  check('agent: exhausted', call(mod.decide, view(false, [step(1, true, 2)])), {
    ok: { tag: 'fail', val: 'script exhausted after 2 decisions' },
  });
  check('agent: reset starts over', call(mod.decide, view(true, [step(0, false)])), {
    ok: { tag: 'call', val: { tool: 'echo', arguments: '{"b":1,"a":[12345678901234567890]}' } },
  });
  await cleanup();
}

await smokePolicy();
await smokeAgent();
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
