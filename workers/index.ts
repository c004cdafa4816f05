/** The seven workers, by the name `SERVICES=` uses. Each is one file in this folder. */
import type { ServiceSchema } from "moleculer";

export const WORKER_PORTS = { dispatcher: 4010, observer: 4020, preserver: 4030, watcher: 4040, publisher: 4050, logger: 4060, cleaner: 4070 } as const;

export function workerCatalog(): Record<string, ServiceSchema> {
	return {
		// one line per worker: name: require("./<name>.worker").default,
		observer: require("./observer.worker").default,
		logger: require("./logger.worker").default,
		cleaner: require("./cleaner.worker").default,
		dispatcher: require("./dispatcher.worker").default,
		preserver: require("./preserver.worker").default,
		publisher: require("./publisher.worker").default,
		watcher: require("./watcher.worker").default,
	};
}
