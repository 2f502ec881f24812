// What the API calls (cma.cc) use of the service (service.cc). Every
// function here but open_devices and shutdown_service is called with
// cm().mu held.
#pragma once

#include "rdmacm/rdmacm_internal.h"

namespace braid::rdmacm {

// Opens every Braid device listed by libibverbs, each with its QP 1, and
// starts the service thread (once). ENODEV when there is none.
int open_devices();
// Stops the service thread and closes the devices (at unload).
void shutdown_service();
void close_device(Device* d);
// The device whose address is ip (host order), or null.
Device* device_for(uint32_t ip);
uint32_t allocate_local_id();
// Queues an event on a channel (dropped if the id it counts against is
// being destroyed); the channel's fd becomes readable.
void push_event(Channel* ch, Event* e);
// After taking the last event off a channel: its fd not readable.
void unsignal(Channel* ch);
// Sends a CM message to the peer's QP 1 (false if no send slot or AH: the
// retransmission timer covers it).
bool send_message(Device* d, uint32_t ip, const cm::Message& m);
// Sends the id's peer a message of one type naming both ids (RTU, MRA, REJ,
// DREQ...), with a reason and private data if given; sent once. Returns it
// (to keep for a resend).
cm::Message send_simple(Id* id, cm::Type t, uint16_t reason = 0, const void* data = nullptr,
                        uint8_t len = 0);
// Sends a message that is resent until answered (REQ, REP, DREQ).
void send_tracked(Id* id, const cm::Message& m);
// Fills the id's route (addresses, GIDs, path record) from its fields.
void fill_route(Id* id);
void qp_to_error(Id* id);
int connect_qp(Id* id);
// rdma_init_qp_attr: the attributes for a->qp_state.
int qp_attr_for(Id* id, ibv_qp_attr* a, int* mask);
ibv_ah* ah_for(Device* d, uint32_t ip);
void kick();

}  // namespace braid::rdmacm
