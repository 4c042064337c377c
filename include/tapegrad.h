/* tapegrad: tensors, reverse-mode autograd and attention modules in C11.
 *
 * A whole training loop, the shape of every tapegrad program:
 *
 *     #include <stdio.h>
 *     #include <tapegrad.h>
 *
 *     int main(void)
 *     {
 *         tg_tape *model = tg_tape_new(), *step = tg_tape_new();
 *         tg_manual_seed(123);
 *         tg_module *mha = tg_mha_new_config(model, (tg_attention_config){
 *             .d_in = 8, .d_out = 8, .context_length = 16, .num_heads = 2});
 *         tg_sgd *opt = tg_sgd_new(model, mha, (tg_sgd_options){.lr = 0.1, .momentum = 0.9});
 *         int64_t shape[3] = {4, 16, 8};
 *         for (int it = 0; it < 100; it++) {
 *             tg_tensor *x = tg_rand(step, TG_F32, 3, shape, NULL);
 *             tg_tensor *y = tg_module_forward(step, mha, x);
 *             tg_tensor *loss = tg_mse_loss(step, y, tg_zeros_like(step, y), TG_REDUCE_MEAN);
 *             if (!loss) { fprintf(stderr, "%s\n", tg_last_error()); return 1; }
 *             tg_sgd_zero_grad(opt);
 *             tg_backward(loss, NULL, false);
 *             tg_sgd_step(opt);
 *             tg_tape_reset(step); // drops every activation: no malloc next step
 *         }
 *         tg_tape_free(step);
 *         tg_tape_free(model); // the module, its parameters and the optimizer
 *         return 0;
 *     }
 *
 * Layers: tensor.h (tapes, tensors, generators, printing, safetensors) below
 * autograd.h (differentiable ops, backward, gradcheck) below nn.h (parameters,
 * modules, attention, state_dict) and gpt.h (the book's GPT, generation);
 * optim.h (SGD, Adam, AdamW, clipping, schedules, checkpoints), data.h
 * (tokenizer, text windows, loaders) and dist.h (data-parallel training over
 * MPI) build on them; train.h (the training loop every task trains
 * through) on all of them; export.h (Hugging Face folders and GGUF files)
 * reads a model and its tokenizer's files.
 */
#ifndef TAPEGRAD_H
#define TAPEGRAD_H

#include "tapegrad/tensor.h"
#include "tapegrad/autograd.h"
#include "tapegrad/nn.h"
#include "tapegrad/optim.h"
#include "tapegrad/gpt.h"
#include "tapegrad/data.h"
#include "tapegrad/dist.h"
#include "tapegrad/train.h"
#include "tapegrad/export.h"

#endif
