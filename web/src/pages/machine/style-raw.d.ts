// Vite answers `import css from './x.css?raw'` with the style sheet's text.
declare module '*.css?raw' {
  const css: string;
  export default css;
}
