/**
 * Service schemas whose handlers see the service's own `this`. Moleculer's types give lifecycle handlers the bare
 * `Service`, which knows nothing of the state a service sets in `created` nor of its methods; a service declares that
 * `this` once (`type Svc = Service & { ... }`, as workers/dispatcher.worker.ts does) and writes its schema as
 * `ServiceOf<Svc>`. Moleculer builds one object of the schema's state, methods and handlers, so every handler's `this`
 * is that object: `asSchema` states it once, where the schema is handed to Moleculer.
 */
import type { Service, ServiceSchema } from "moleculer";

export interface ServiceOf<T extends Service> {
	name?: string;
	settings?: ServiceSchema["settings"];
	dependencies?: ServiceSchema["dependencies"];
	mixins?: Partial<ServiceSchema>[];
	hooks?: ServiceSchema["hooks"];
	actions?: ServiceSchema["actions"];
	events?: ServiceSchema["events"];
	methods?: ServiceSchema["methods"];
	created?(this: T): void;
	started?(this: T): void | Promise<void>;
	stopped?(this: T): void | Promise<void>;
}

/** The schema as Moleculer takes it (its handlers' `this` is the service, which is `T`). */
export function asSchema<T extends Service>(schema: ServiceOf<T>): ServiceSchema {
	return schema as unknown as ServiceSchema;
}
