import { defineConfig } from "vite";

// The gateway serves dist/ at / under a strict Content-Security-Policy (script-src 'self'):
// no inline script may be emitted, and the module-preload polyfill (an inline helper in
// some setups) is not needed by the browsers we support.
export default defineConfig({
  base: "/",
  build: {
    outDir: "dist",
    emptyOutDir: true,
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
    sourcemap: false,
    target: "es2022",
  },
});
