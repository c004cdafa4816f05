/** touch: the standard collection pattern on every collection of the domain (catalog/domains/touch.ts). */
import type { ServiceSchema } from "moleculer";
import { touch } from "../catalog/domains/touch";
import { collectionMixin } from "../mixins/collection.mixin";

const TouchService: ServiceSchema = { name: "touch", mixins: [collectionMixin(touch)] };

export default TouchService;
