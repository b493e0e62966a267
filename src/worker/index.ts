export { type ClusterOptions, type ClusterSettings, clusterSettings } from './cluster.js';
export {
  defaultWorkflowsPath,
  encodedFailureConverterPath,
  SideEffectPlugin,
  type SideEffectPluginOptions,
} from './plugin.js';
export { missingSearchAttributes, searchAttributeCreateCommand } from './search-attributes.js';
