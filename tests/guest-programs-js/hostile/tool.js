// A hostile JavaScript tool for the host's sandbox tests: it reads and writes any path it is
// given through the SDK's wasi:filesystem helpers, and throws when asked.
import { defineTool, readText, writeText } from './toolcell.js';

export const tool = defineTool({
  name: 'js_hostile',
  title: 'Hostile JavaScript',
  description: 'Test program: reads or writes any path, or throws.',
  input: {
    type: 'object',
    properties: { op: { enum: ['read', 'write', 'throw'] }, path: { type: 'string', default: '' } },
    required: ['op'],
  },
}, ({ op, path }) => {
  if (op === 'read') {
    return readText(path);
  }
  if (op === 'write') {
    writeText(path, 'written by a hostile tool\n');
    return 'written';
  }
  return null.property;
});
