/**
 * What a booted platform can hand out, read from the platform itself for the delivery-path matrix
 * (test/integration/delivery-paths.test.ts): the gateway's routes (moleculer-web's alias list, each with the catalog
 * route it was made from and the handler the broker runs for it), its HTTP upgrade handlers, the workers, the change
 * stream's consumer groups, and the other services of the node.
 */
import { allRoutes, type RouteDef } from "../../lib/routes";
import type { TestPlatform } from "./platform";

export interface GatewayRoute {
	/** `GET /content/notes/:id` */
	name: string;
	method: string;
	path: string;
	/** moleculer-web's route (`api`, `public`, `logout`, `token`, `ops`). */
	route: string;
	/** The catalog's route it was made from (lib/routes.ts), when any. */
	def?: RouteDef;
	/**
	 * What the action the broker runs for it declares: `op:<op>` (the collection engine's standard operation),
	 * `special:<action>` (a special action of the collection engine), undefined for anything else.
	 */
	engine?: string;
}

export interface Surface {
	routes: GatewayRoute[];
	/** Listeners of the gateway's HTTP server `upgrade` event (WebSocket and any other protocol switch). */
	upgrades: number;
	/** Services marked `settings.worker`. */
	workers: string[];
	/** Consumer groups of the change stream. */
	groups: string[];
	/** Every other service of the node. */
	services: string[];
}

interface Alias {
	method: string;
	fullPath: string;
	action?: string | null;
	route?: { name?: string };
}

/** The action definition the broker runs for `name`, from its registry. */
function actionDef(p: TestPlatform, name: string): Record<string, any> | undefined {
	const list = (p.broker.registry as any).getActionEndpoints(name);
	return list?.endpoints?.[0]?.action;
}

/** `groups`: the consumer groups the platform started (test/helpers/delivery-world.ts records them as they start). */
export function surfaceOf(p: TestPlatform, groups: string[]): Surface {
	const api = p.broker.getLocalService("api") as any;
	const defs = new Map(allRoutes().map((r) => [`${r.method} ${r.path}`, r]));
	const routes = (api.aliases as Alias[]).map((a): GatewayRoute => {
		const name = `${a.method} ${a.fullPath}`;
		const def = defs.get(name);
		const action = def?.action ?? (typeof a.action === "string" ? a.action : undefined);
		const d = action ? actionDef(p, action) : undefined;
		const engine = d?.collection?.op ? `op:${d.collection.op}` : d?.special?.action ? `special:${d.special.action}` : undefined;
		return { name, method: a.method, path: a.fullPath, route: a.route?.name ?? "", def, engine };
	});
	const local = p.broker.services as Array<{ name: string; settings?: { worker?: boolean } }>;
	return {
		routes,
		upgrades: api.server.listenerCount("upgrade"),
		workers: local.filter((s) => s.settings?.worker).map((s) => s.name),
		groups,
		services: local.filter((s) => !s.settings?.worker).map((s) => s.name),
	};
}
