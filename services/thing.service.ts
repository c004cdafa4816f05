/** thing: the standard collection pattern on every collection of the domain (catalog/domains/thing.ts). */
import type { ServiceSchema } from "moleculer";
import { thing } from "../catalog/domains/thing";
import { collectionMixin } from "../engine/collection.mixin";

const ThingService: ServiceSchema = { name: "thing", mixins: [collectionMixin(thing)] };

export default ThingService;
