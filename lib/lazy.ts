/**
 * A value made on its first use and kept. Modules that only some deployments or some requests use (the MCP SDK, the
 * console's command set, Redis, SMTP, Web Push, an MQTT client) are loaded this way: every process, and every test
 * file, that never uses one would otherwise compile it at start (about 0.7 s of CPU in all, measured in docs/decisions.md,
 * "Modules loaded on first use").
 */
export function lazy<T>(make: () => T): () => T {
	let made = false;
	let value: T;
	return () => {
		if (!made) {
			value = make();
			made = true;
		}
		return value;
	};
}
