/*
 * ggml-vulkan-compat.h: lets ggml 0.26.0's Vulkan backend (ggml-vulkan.cpp)
 * compile against Vulkan headers older than 1.3.272, such as Debian 12's
 * 1.3.239.
 *
 * Force-include it into the C++ compile of ggml-vulkan.cpp:
 *     g++ -include /path/to/ggml-vulkan-compat.h ... ggml-vulkan.cpp
 * (harmless in any other translation unit, C or C++; with headers that have
 * the extension it declares nothing).
 *
 * What ggml-vulkan.cpp needs that 1.3.239 lacks: the extension
 * VK_EXT_layer_settings, which reached Vulkan-Headers in 1.3.272.
 * ggml_vk_instance_init() always builds
 *     std::vector<vk::LayerSettingEXT> settings = {
 *         { "VK_LAYER_KHRONOS_validation", "validate_best_practices",
 *           vk::LayerSettingTypeEXT::eBool32, 1, &enable_best_practice } };
 *     vk::LayerSettingsCreateInfoEXT layer_setting_info(settings);
 * and passes &layer_setting_info as the pNext of vk::InstanceCreateInfo (the
 * extension itself is only enabled in GGML_VULKAN_VALIDATE builds, where the
 * validation layer offers it). That is all: vk::LayerSettingEXT (aggregate of
 * five fields), vk::LayerSettingTypeEXT::eBool32, and
 * vk::LayerSettingsCreateInfoEXT constructed from a std::vector of settings.
 *
 * vulkan.hpp itself must not be included here: ggml-vulkan-types.h defines
 * VULKAN_HPP_DISPATCH_LOADER_DYNAMIC and VULKAN_HPP_DEFAULT_DISPATCHER before
 * it includes <vulkan/vulkan.hpp>. So this header includes only the C header
 * <vulkan/vulkan_core.h> (which ggml-vulkan-types.h includes first anyway)
 * and declares the C++ types itself, with the same layout as the C structs
 * (which is also the layout vulkan.hpp's own wrappers have).
 */
#ifndef GGML_VULKAN_COMPAT_H
#define GGML_VULKAN_COMPAT_H

#if defined(__has_include)
#  if __has_include(<vulkan/vulkan_core.h>)
#    include <vulkan/vulkan_core.h>
#  endif
#endif

/* Vulkan-Headers 1.3.272 is the first release with VK_EXT_layer_settings. */
#if defined(VK_HEADER_VERSION) && VK_HEADER_VERSION < 272 && !defined(VK_EXT_layer_settings)
#define VK_EXT_layer_settings 1
#define VK_EXT_LAYER_SETTINGS_SPEC_VERSION 2
#define VK_EXT_LAYER_SETTINGS_EXTENSION_NAME "VK_EXT_layer_settings"
#define VK_STRUCTURE_TYPE_LAYER_SETTINGS_CREATE_INFO_EXT ((VkStructureType)1000496000)

typedef enum VkLayerSettingTypeEXT {
    VK_LAYER_SETTING_TYPE_BOOL32_EXT   = 0,
    VK_LAYER_SETTING_TYPE_INT32_EXT    = 1,
    VK_LAYER_SETTING_TYPE_INT64_EXT    = 2,
    VK_LAYER_SETTING_TYPE_UINT32_EXT   = 3,
    VK_LAYER_SETTING_TYPE_UINT64_EXT   = 4,
    VK_LAYER_SETTING_TYPE_FLOAT32_EXT  = 5,
    VK_LAYER_SETTING_TYPE_FLOAT64_EXT  = 6,
    VK_LAYER_SETTING_TYPE_STRING_EXT   = 7,
    VK_LAYER_SETTING_TYPE_MAX_ENUM_EXT = 0x7FFFFFFF
} VkLayerSettingTypeEXT;

typedef struct VkLayerSettingEXT {
    const char *          pLayerName;
    const char *          pSettingName;
    VkLayerSettingTypeEXT type;
    uint32_t              valueCount;
    const void *          pValues;
} VkLayerSettingEXT;

typedef struct VkLayerSettingsCreateInfoEXT {
    VkStructureType           sType;
    const void *              pNext;
    uint32_t                  settingCount;
    const VkLayerSettingEXT * pSettings;
} VkLayerSettingsCreateInfoEXT;

#ifdef __cplusplus
namespace vk {

enum class LayerSettingTypeEXT {
    eBool32  = VK_LAYER_SETTING_TYPE_BOOL32_EXT,
    eInt32   = VK_LAYER_SETTING_TYPE_INT32_EXT,
    eInt64   = VK_LAYER_SETTING_TYPE_INT64_EXT,
    eUint32  = VK_LAYER_SETTING_TYPE_UINT32_EXT,
    eUint64  = VK_LAYER_SETTING_TYPE_UINT64_EXT,
    eFloat32 = VK_LAYER_SETTING_TYPE_FLOAT32_EXT,
    eFloat64 = VK_LAYER_SETTING_TYPE_FLOAT64_EXT,
    eString  = VK_LAYER_SETTING_TYPE_STRING_EXT
};

/* An aggregate, so that ggml's brace initialiser fills it field by field. */
struct LayerSettingEXT {
    const char *        pLayerName   = nullptr;
    const char *        pSettingName = nullptr;
    LayerSettingTypeEXT type         = LayerSettingTypeEXT::eBool32;
    uint32_t            valueCount   = 0;
    const void *        pValues      = nullptr;
};
static_assert(sizeof(LayerSettingEXT) == sizeof(VkLayerSettingEXT), "LayerSettingEXT layout");

struct LayerSettingsCreateInfoEXT {
    VkStructureType         sType        = VK_STRUCTURE_TYPE_LAYER_SETTINGS_CREATE_INFO_EXT;
    const void *            pNext        = nullptr;
    uint32_t                settingCount = 0;
    const LayerSettingEXT * pSettings    = nullptr;

    LayerSettingsCreateInfoEXT() = default;
    /* vulkan.hpp takes an ArrayProxyNoTemporaries; ggml passes a std::vector. */
    template <typename Settings>
    explicit LayerSettingsCreateInfoEXT(const Settings & settings, const void * pNext_ = nullptr)
        : pNext(pNext_), settingCount(static_cast<uint32_t>(settings.size())), pSettings(settings.data()) {}

    operator const VkLayerSettingsCreateInfoEXT &() const {
        return *reinterpret_cast<const VkLayerSettingsCreateInfoEXT *>(this);
    }
};
static_assert(sizeof(LayerSettingsCreateInfoEXT) == sizeof(VkLayerSettingsCreateInfoEXT),
              "LayerSettingsCreateInfoEXT layout");

} // namespace vk
#endif /* __cplusplus */

#endif /* VK_HEADER_VERSION < 272 && !VK_EXT_layer_settings */

#endif /* GGML_VULKAN_COMPAT_H */
