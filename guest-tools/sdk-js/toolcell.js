// Write toolcell tools in JavaScript: a description with its argument schema, and a function.
//
//   import { defineTool, readText } from './toolcell.js';
//
//   export const tool = defineTool({
//     name: 'line_count', title: 'Line count', readOnly: true,
//     description: 'Count the lines of a text file.',
//     input: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
//     output: { type: 'object', properties: { lines: { type: 'integer' } }, required: ['lines'] },
//   }, ({ path }) => {
//     const lines = readText(path).split('\n').length;
//     return { text: `${path}: ${lines} lines`, structured: { lines } };
//   });
//
// The host validates every call's arguments against `input` before the tool runs, and the
// tool receives them with the schema's `default`s filled in, so the schema is the one
// description of the arguments. JavaScript has no file API of its own here: the helpers below
// reach the workspace through `wasi:filesystem`, and the host checks every access against the
// policy, whatever the tool does. Build with componentize-js against toolcell's `wit/` (world
// `tool-component`); see guest-tools/README.md.

import { getDirectories } from 'wasi:filesystem/preopens@0.2.12';
import * as context from 'toolcell:tool/context@0.2.2';

const KINDS = ['invalid-args', 'not-found', 'denied', 'conflict', 'too-large', 'unsupported', 'failed'];

/** A failure the agent sees: `kind` is a WIT `tool-error` case, the message says what to do. */
export class ToolError extends Error {
  constructor(kind, message) {
    if (!KINDS.includes(kind)) {
      throw new TypeError(`\`${kind}\` is not a tool-error kind: use one of ${KINDS.join(', ')}`);
    }
    super(message);
    this.kind = kind;
  }
}

/** The `toolcell:tool/tool` export: assign it to `export const tool`. */
export function defineTool(description, run) {
  const { name, title, input, output } = description;
  const readOnly = Boolean(description.readOnly);
  const info = {
    name,
    title,
    description: description.description,
    inputSchema: JSON.stringify(input),
    outputSchema: output === undefined ? undefined : JSON.stringify(output),
    annotations: {
      readOnly,
      destructive: Boolean(description.destructive),
      idempotent: Boolean(description.idempotent) || readOnly,
    },
  };
  return {
    describe() {
      return info;
    },
    call(args) {
      let result;
      try {
        result = run(withDefaults(input, JSON.parse(args)));
      } catch (error) {
        if (error instanceof ToolError) {
          throw { tag: error.kind, val: error.message };
        }
        // Where it happened, in JavaScript's terms: the first frame of the stack.
        const frame = String(error?.stack ?? '').split('\n').find((line) => line.includes(':')) ?? '';
        console.error(error?.stack ?? String(error));
        throw { tag: 'failed', val: `the tool threw ${error?.name ?? 'an error'}: ${error?.message ?? error}${frame ? ` (at ${frame.trim()})` : ''}; this is a bug in the tool` };
      }
      if (typeof result === 'string') {
        return { text: result, structured: undefined };
      }
      return { text: result.text, structured: result.structured === undefined ? undefined : JSON.stringify(result.structured) };
    },
  };
}

function withDefaults(schema, value) {
  if (schema?.type !== 'object' || value === null || typeof value !== 'object') {
    return value;
  }
  const filled = { ...value };
  for (const [key, property] of Object.entries(schema.properties ?? {})) {
    if (filled[key] === undefined && property.default !== undefined) {
      filled[key] = structuredClone(property.default);
    } else if (filled[key] !== undefined) {
      filled[key] = withDefaults(property, filled[key]);
    }
  }
  return filled;
}

let rootDescriptor;

function root() {
  if (rootDescriptor === undefined) {
    const found = getDirectories().find(([, name]) => name === '.');
    if (!found) {
      throw new ToolError('failed', 'the host granted no workspace');
    }
    rootDescriptor = found[0];
  }
  return rootDescriptor;
}

/** A WASI filesystem error about `path` as the tool error an agent should see. */
function fileError(path, error) {
  const code = error?.payload ?? error;
  switch (code) {
    case 'no-entry':
    case 'not-directory':
      return new ToolError('not-found', `\`${path}\` does not exist: check the path with list_files`);
    case 'access':
    case 'not-permitted':
      return new ToolError('denied', `access to \`${path}\` was refused by the host: it is outside the workspace or the policy does not allow it`);
    case 'is-directory':
      return new ToolError('unsupported', `\`${path}\` is a directory`);
    case 'exist':
      return new ToolError('conflict', `\`${path}\` already exists`);
    default:
      return new ToolError('failed', `\`${path}\`: ${String(code)}`);
  }
}

function attempt(path, action) {
  try {
    return action();
  } catch (error) {
    throw error instanceof ToolError ? error : fileError(path, error);
  }
}

/** The bytes of the workspace file `path`. */
export function readBytes(path) {
  return attempt(path, () => {
    const file = root().openAt({ symlinkFollow: true }, path, {}, { read: true });
    const chunks = [];
    let offset = 0n;
    for (;;) {
      const [chunk, end] = file.read(65536n, offset);
      chunks.push(chunk);
      offset += BigInt(chunk.length);
      if (end || chunk.length === 0) {
        break;
      }
    }
    const bytes = new Uint8Array(chunks.reduce((total, chunk) => total + chunk.length, 0));
    let at = 0;
    for (const chunk of chunks) {
      bytes.set(chunk, at);
      at += chunk.length;
    }
    return bytes;
  });
}

/** The text (UTF-8) of the workspace file `path`. */
export function readText(path) {
  return new TextDecoder().decode(readBytes(path));
}

/** Write `text` to the workspace file `path`, replacing it whole (parents must exist). */
export function writeText(path, text) {
  attempt(path, () => {
    const file = root().openAt({ symlinkFollow: true }, path, { create: true, truncate: true }, { write: true });
    const bytes = new TextEncoder().encode(text);
    let offset = 0;
    while (offset < bytes.length) {
      offset += Number(file.write(bytes.subarray(offset, offset + 65536), BigInt(offset)));
    }
  });
}

/** What `path` is: `{ type: 'file' | 'directory' | 'symlink' | 'other', size }`. */
export function stat(path) {
  return attempt(path, () => {
    const facts = root().statAt({}, path);
    const type = { 'regular-file': 'file', directory: 'directory', 'symbolic-link': 'symlink' }[facts.type] ?? 'other';
    return { type, size: Number(facts.size) };
  });
}

/** The entries of the directory `path`, sorted by name: `[{ name, type }]`. */
export function listDir(path) {
  return attempt(path, () => {
    const directory = root().openAt({ symlinkFollow: true }, path, { directory: true }, { read: true });
    const stream = directory.readDirectory();
    const entries = [];
    for (let entry = stream.readDirectoryEntry(); entry !== undefined; entry = stream.readDirectoryEntry()) {
      const type = { 'regular-file': 'file', directory: 'directory', 'symbolic-link': 'symlink' }[entry.type] ?? 'other';
      entries.push({ name: entry.name, type });
    }
    return entries.sort((left, right) => (left.name < right.name ? -1 : left.name > right.name ? 1 : 0));
  });
}

/** The workspace-relative paths of the regular files under `top` (each directory's files by
 * name, then its subdirectories), without following symlinks or entering `.git`; directories
 * the host hides are left out. */
export function* walk(top = '.') {
  if (stat(top).type === 'file') {
    yield top;
    return;
  }
  const pending = [top];
  while (pending.length > 0) {
    const directory = pending.shift();
    let entries;
    try {
      entries = listDir(directory);
    } catch {
      continue;
    }
    const join = (name) => (directory === '.' ? name : `${directory}/${name}`);
    const subdirectories = [];
    for (const { name, type } of entries) {
      if (type === 'file') {
        yield join(name);
      } else if (type === 'directory' && name !== '.git') {
        subdirectories.push(join(name));
      }
    }
    pending.unshift(...subdirectories);
  }
}

/** The role the caller acts as. */
export const role = () => context.role();
/** The caller's session id. */
export const sessionId = () => context.sessionId();
/** This call's id (its audit record's key). */
export const callId = () => context.callId();
/** Attach a note to this call's audit record. */
export const note = (text) => context.note(text);
/** Keep up to 64 KiB for this tool's later calls in the session (a hint, never a fact). */
export const remember = (key, bytes) => context.remember(key, bytes);
/** What this tool kept under `key` earlier in the session, if the host still holds it. */
export const recall = (key) => context.recall(key);

/** Show the agent an image (PNG, JPEG, GIF or WebP bytes) beside the result's text. */
export function attachImage(mimeType, bytes) {
  try {
    context.attachImage(mimeType, bytes);
  } catch (error) {
    const value = error?.payload ?? error;
    throw new ToolError(value?.tag ?? 'failed', value?.val ?? String(value));
  }
}
