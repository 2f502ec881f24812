// IBVERBS_PRIVATE_34: the interface between rdma-core's libibverbs and its
// providers (libmlx5, libefa...). Braid has no kernel device for a provider
// to drive, but programs such as perftest link libmlx5 and libefa, whose
// constructors register their driver and whose other imports must resolve
// (the programs are linked BIND_NOW). So every symbol exists: registration
// is accepted and ignored (no provider ever gets a device), the rest fail
// with EOPNOTSUPP. The parameters are not used and not declared: at the
// machine level a stub may ignore what it is passed.
#include <cerrno>
#include <cstddef>

extern "C" {

// Read by providers; nothing in Braid changes it.
__attribute__((visibility("default"))) bool verbs_allow_disassociate_destroy = false;

#define BRAID_STUB_VOID(name) \
  __attribute__((visibility("default"))) void name() {}
#define BRAID_STUB_INT(name)                          \
  __attribute__((visibility("default"))) int name() { \
    errno = EOPNOTSUPP;                               \
    return EOPNOTSUPP;                                \
  }
#define BRAID_STUB_PTR(name)                            \
  __attribute__((visibility("default"))) void* name() { \
    errno = EOPNOTSUPP;                                 \
    return nullptr;                                     \
  }

BRAID_STUB_VOID(verbs_register_driver_34)
BRAID_STUB_VOID(verbs_set_ops)
BRAID_STUB_VOID(verbs_uninit_context)
BRAID_STUB_VOID(__verbs_log)
BRAID_STUB_PTR(_verbs_init_and_alloc_context)
BRAID_STUB_PTR(verbs_open_device)

BRAID_STUB_INT(__ioctl_final_num_attrs)
BRAID_STUB_INT(execute_ioctl)
BRAID_STUB_INT(ibv_read_ibdev_sysfs_file)
BRAID_STUB_INT(verbs_init_cq)
BRAID_STUB_INT(ibv_cmd_advise_mr)
BRAID_STUB_INT(ibv_cmd_alloc_dm)
BRAID_STUB_INT(ibv_cmd_alloc_mw)
BRAID_STUB_INT(ibv_cmd_alloc_pd)
BRAID_STUB_INT(ibv_cmd_attach_mcast)
BRAID_STUB_INT(ibv_cmd_close_xrcd)
BRAID_STUB_INT(ibv_cmd_create_ah)
BRAID_STUB_INT(ibv_cmd_create_counters)
BRAID_STUB_INT(ibv_cmd_create_cq)
BRAID_STUB_INT(ibv_cmd_create_cq_ex)
BRAID_STUB_INT(ibv_cmd_create_flow)
BRAID_STUB_INT(ibv_cmd_create_flow_action_esp)
BRAID_STUB_INT(ibv_cmd_create_qp)
BRAID_STUB_INT(ibv_cmd_create_qp_ex)
BRAID_STUB_INT(ibv_cmd_create_qp_ex2)
BRAID_STUB_INT(ibv_cmd_create_rwq_ind_table)
BRAID_STUB_INT(ibv_cmd_create_srq)
BRAID_STUB_INT(ibv_cmd_create_srq_ex)
BRAID_STUB_INT(ibv_cmd_create_wq)
BRAID_STUB_INT(ibv_cmd_dealloc_mw)
BRAID_STUB_INT(ibv_cmd_dealloc_pd)
BRAID_STUB_INT(ibv_cmd_dereg_mr)
BRAID_STUB_INT(ibv_cmd_destroy_ah)
BRAID_STUB_INT(ibv_cmd_destroy_counters)
BRAID_STUB_INT(ibv_cmd_destroy_cq)
BRAID_STUB_INT(ibv_cmd_destroy_flow)
BRAID_STUB_INT(ibv_cmd_destroy_flow_action)
BRAID_STUB_INT(ibv_cmd_destroy_qp)
BRAID_STUB_INT(ibv_cmd_destroy_rwq_ind_table)
BRAID_STUB_INT(ibv_cmd_destroy_srq)
BRAID_STUB_INT(ibv_cmd_destroy_wq)
BRAID_STUB_INT(ibv_cmd_detach_mcast)
BRAID_STUB_INT(ibv_cmd_free_dm)
BRAID_STUB_INT(ibv_cmd_get_context)
BRAID_STUB_INT(ibv_cmd_modify_cq)
BRAID_STUB_INT(ibv_cmd_modify_flow_action_esp)
BRAID_STUB_INT(ibv_cmd_modify_qp)
BRAID_STUB_INT(ibv_cmd_modify_qp_ex)
BRAID_STUB_INT(ibv_cmd_modify_srq)
BRAID_STUB_INT(ibv_cmd_modify_wq)
BRAID_STUB_INT(ibv_cmd_open_qp)
BRAID_STUB_INT(ibv_cmd_open_xrcd)
BRAID_STUB_INT(ibv_cmd_poll_cq)
BRAID_STUB_INT(ibv_cmd_post_recv)
BRAID_STUB_INT(ibv_cmd_post_send)
BRAID_STUB_INT(ibv_cmd_post_srq_recv)
BRAID_STUB_INT(ibv_cmd_query_context)
BRAID_STUB_INT(ibv_cmd_query_device_any)
BRAID_STUB_INT(ibv_cmd_query_mr)
BRAID_STUB_INT(ibv_cmd_query_port)
BRAID_STUB_INT(ibv_cmd_query_qp)
BRAID_STUB_INT(ibv_cmd_query_srq)
BRAID_STUB_INT(ibv_cmd_read_counters)
BRAID_STUB_INT(ibv_cmd_reg_dm_mr)
BRAID_STUB_INT(ibv_cmd_reg_dmabuf_mr)
BRAID_STUB_INT(ibv_cmd_reg_mr)
BRAID_STUB_INT(ibv_cmd_req_notify_cq)
BRAID_STUB_INT(ibv_cmd_rereg_mr)
BRAID_STUB_INT(ibv_cmd_resize_cq)

}  // extern "C"
