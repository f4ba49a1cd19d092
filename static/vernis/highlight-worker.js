// Syntax highlighting off the page's main thread (see markdown.js): highlight.js's module evaluates
// its grammars when imported (tens of milliseconds in one task), and a grammar compiles at its first
// use; here neither holds up the page. A message {id, code, language}; the answer {id, html}, the
// code's text escaped in highlight.js's spans, or null when the language is not one it knows.
import hljs from "../vendor/highlight.js";

self.onmessage = ({ data: { id, code, language } }) => {
  const html = hljs.getLanguage(language) ? hljs.highlight(code, { language, ignoreIllegals: true }).value : null;
  self.postMessage({ id, html });
};
