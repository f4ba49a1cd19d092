// Bundle the page into dist/ (index.html, app.js, app.css): served as static files from any origin
// that Vernis allows (VERNIS_ALLOWED_ORIGINS). Run by scripts/bootstrap, or `npm run build`.
import { copyFile, mkdir } from "node:fs/promises";
import { build } from "esbuild";

const here = new URL(".", import.meta.url).pathname;

await mkdir(`${here}dist`, { recursive: true });
await build({
  absWorkingDir: here,
  entryPoints: { app: "src/main.jsx" },
  outdir: "dist",
  bundle: true,
  format: "esm",
  // The chat's heavy renderers (diagrams, code highlighting) load as chunks, when an answer needs them.
  splitting: true,
  chunkNames: "chunks/[name]-[hash]",
  jsx: "automatic",
  minify: true,
  target: "es2022",
  define: { "process.env.NODE_ENV": '"production"' },
  logLevel: "warning",
  legalComments: "linked",
  // KaTeX's fonts (CopilotKit renders math in answers): copied beside the bundle.
  loader: { ".woff2": "file", ".woff": "file", ".ttf": "file" },
  assetNames: "assets/[name]-[hash]",
});
await copyFile(`${here}index.html`, `${here}dist/index.html`);
