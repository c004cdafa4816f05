/** Jest runs the TypeScript sources directly through SWC (no type-check here: `npm run typecheck` does that). */
module.exports = {
	testEnvironment: "node",
	roots: ["<rootDir>/test"],
	testMatch: ["**/*.test.ts"],
	transform: { "^.+\\.ts$": ["@swc/jest", { jsc: { target: "es2022", parser: { syntax: "typescript" } }, module: { type: "commonjs" } }] },
	testTimeout: 30000,
};
