// A toolcell tool in JavaScript: the most frequent words of the text files under a path.
import { defineTool, note, readText, walk } from './toolcell.js';

export const tool = defineTool({
  name: 'word_freq',
  title: 'Word frequency',
  readOnly: true,
  description: 'The most frequent words (letters only, lowercased) of the text files under `path`, as `count word` lines.',
  input: {
    type: 'object',
    properties: {
      path: { type: 'string', default: '.', description: 'The file or directory to count, relative to the workspace root.' },
      top: { type: 'integer', minimum: 1, maximum: 100, default: 10, description: 'How many words to list.' },
    },
    additionalProperties: false,
  },
  output: {
    type: 'object',
    properties: { words: { type: 'array', items: { type: 'object', properties: { word: { type: 'string' }, count: { type: 'integer' } }, required: ['word', 'count'] } }, files: { type: 'integer' } },
    required: ['words', 'files'],
  },
}, ({ path, top }) => {
  const counts = new Map();
  const files = [...walk(path)];
  for (const file of files) {
    for (const word of readText(file).toLowerCase().match(/[a-z]+/g) ?? []) {
      counts.set(word, (counts.get(word) ?? 0) + 1);
    }
  }
  const words = [...counts].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).slice(0, top).map(([word, count]) => ({ word, count }));
  note(`${counts.size} distinct words in ${files.length} files`);
  return { text: words.map(({ word, count }) => `${count} ${word}`).join('\n') || `No words under \`${path}\`.`, structured: { words, files: files.length } };
});
